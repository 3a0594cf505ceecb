//! `${NAME}` references to environment variables, so secrets need not live in the file. A pass
//! of its own, run before the checks, which then see the expanded values.

use super::{invalid, Config, ConfigError};

impl Config {
    /// Replaces every `${NAME}` with the environment variable `NAME` in these keys only:
    ///
    /// - `route[i].auth.tokens[t].token` and `.sha256` (bearer tokens);
    /// - `backend.NAME.headers.*` (values, not names);
    /// - `backend.NAME.env.*` (values);
    /// - `backend.NAME.token_exchange.client_secret`;
    /// - `mrtr.keys[i]` (not the lines of `keys_file`);
    /// - `mrtr.instance_id` and `fleet.advertise` (per replica, e.g. `${POD_NAME}` and
    ///   `${POD_IP}:8080`).
    ///
    /// An unset variable or an unterminated `${` is an error naming the key.
    pub(super) fn expand_env_vars(&mut self) -> Result<(), ConfigError> {
        for (i, route) in self.routes.iter_mut().enumerate() {
            if let super::AuthConfig::Bearer { tokens, .. } = &mut route.auth {
                for (t, token) in tokens.iter_mut().enumerate() {
                    let tkey = format!("route[{i}].auth.tokens[{t}]");
                    for secret in [token.token.as_mut(), token.sha256.as_mut()]
                        .into_iter()
                        .flatten()
                    {
                        *secret = expand_env(&tkey, secret)?;
                    }
                }
            }
        }
        for (name, backend) in self.backends.iter_mut() {
            for (h, v) in backend.headers.iter_mut() {
                *v = expand_env(&format!("backend.{name}.headers.{h}"), v)?;
            }
            for (k, v) in backend.env.iter_mut() {
                *v = expand_env(&format!("backend.{name}.env.{k}"), v)?;
            }
            if let Some(exchange) = backend.token_exchange.as_mut() {
                exchange.client_secret = expand_env(
                    &format!("backend.{name}.token_exchange.client_secret"),
                    &exchange.client_secret,
                )?;
            }
        }
        for (i, k) in self.mrtr.keys.iter_mut().enumerate() {
            *k = expand_env(&format!("mrtr.keys[{i}]"), k)?;
        }
        if let Some(id) = &mut self.mrtr.instance_id {
            *id = expand_env("mrtr.instance_id", id)?;
        }
        if let Some(fleet) = &mut self.fleet {
            fleet.advertise = expand_env("fleet.advertise", &fleet.advertise)?;
        }
        Ok(())
    }
}

/// Replaces every `${NAME}` in `value` with the environment variable `NAME`; `key` names the
/// value in errors.
fn expand_env(key: &str, value: &str) -> Result<String, ConfigError> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| invalid(key, "unterminated ${...}"))?;
        let name = &after[..end];
        let val = std::env::var(name)
            .map_err(|_| invalid(key, format!("environment variable {name} is not set")))?;
        out.push_str(&val);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Variables no test sets; `PATH` stands for one that is set (tests run in parallel, so
    /// none sets a variable of its own).
    const UNSET: &str = "MRTR_TEST_EXPAND_UNSET";

    fn path_var() -> String {
        std::env::var("PATH").unwrap_or_else(|e| panic!("PATH: {e}"))
    }

    #[test]
    fn a_set_variable_is_replaced_in_place() {
        let path = path_var();
        assert_eq!(
            expand_env("k", "a ${PATH} b ${PATH}").unwrap(),
            format!("a {path} b {path}")
        );
        assert_eq!(expand_env("k", "no reference").unwrap(), "no reference");
    }

    #[test]
    fn an_unset_variable_or_open_reference_names_the_key() {
        assert_eq!(
            expand_env("backend.b.env.X", &format!("${{{UNSET}}}"))
                .unwrap_err()
                .to_string(),
            format!("backend.b.env.X: environment variable {UNSET} is not set")
        );
        assert_eq!(
            expand_env("k", "${PATH").unwrap_err().to_string(),
            "k: unterminated ${...}"
        );
    }

    fn config(text: &str) -> Config {
        toml::from_str(text).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_pass_expands_each_listed_key() {
        let path = path_var();
        let mut c = config(
            r#"
            [[route]]
            path = "/mcp"
            backend = "b"
            auth = { mode = "bearer", tokens = [{ principal = "p", token = "t-${PATH}" }, { principal = "q", sha256 = "${PATH}" }] }
            [backend.b]
            transport = "http"
            url = "http://127.0.0.1:9/${PATH}"
            headers = { X = "h-${PATH}" }
            env = { Y = "e-${PATH}" }
            [mrtr]
            keys = ["k-${PATH}"]
            instance_id = "i-${PATH}"
            [fleet]
            advertise = "${PATH}:8080"
            "#,
        );
        c.expand_env_vars().unwrap();
        let crate::config::AuthConfig::Bearer { tokens, .. } = &c.routes[0].auth else {
            panic!("bearer auth");
        };
        assert_eq!(
            tokens[0].token.as_deref(),
            Some(format!("t-{path}").as_str())
        );
        assert_eq!(tokens[1].sha256.as_deref(), Some(path.as_str()));
        let b = &c.backends["b"];
        assert_eq!(b.headers["X"], format!("h-{path}"));
        assert_eq!(b.env["Y"], format!("e-{path}"));
        assert_eq!(c.mrtr.keys[0], format!("k-{path}"));
        assert_eq!(c.mrtr.instance_id, Some(format!("i-{path}")));
        assert_eq!(
            c.fleet.as_ref().map(|f| f.advertise.as_str()),
            Some(format!("{path}:8080").as_str())
        );
        // Keys outside the list are left as written.
        assert_eq!(b.url.as_deref(), Some("http://127.0.0.1:9/${PATH}"));
    }

    #[test]
    fn the_pass_names_the_key_of_an_unset_variable() {
        let cases = [
            (
                format!("[[route]]\npath = \"/mcp\"\nbackend = \"b\"\nauth = {{ mode = \"bearer\", tokens = [{{ principal = \"p\", sha256 = \"${{{UNSET}}}\" }}] }}\n"),
                "route[0].auth.tokens[0]",
            ),
            (
                format!("[backend.b]\ntransport = \"http\"\nheaders = {{ Authorization = \"Bearer ${{{UNSET}}}\" }}\n"),
                "backend.b.headers.Authorization",
            ),
            (
                format!("[backend.b]\ntransport = \"stdio\"\nenv = {{ TOKEN = \"${{{UNSET}}}\" }}\n"),
                "backend.b.env.TOKEN",
            ),
            (format!("[mrtr]\nkeys = [\"a\", \"${{{UNSET}}}\"]\n"), "mrtr.keys[1]"),
        ];
        for (text, key) in cases {
            let err = config(&text).expand_env_vars().unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("{key}: environment variable {UNSET} is not set")
            );
        }
    }
}
