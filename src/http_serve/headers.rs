//! Request headers as both eras read them: one value per header (the same header twice with
//! different values is refused), and the `=?base64?...?=` sentinel form of a value.

use base64::Engine;
use http::HeaderMap;

use crate::error::GatewayError;

/// Decodes the `=?base64?...?=` sentinel form of a header value.
pub fn decode_header_value(raw: &str) -> Result<String, String> {
    match raw
        .strip_prefix("=?base64?")
        .and_then(|rest| rest.strip_suffix("?="))
    {
        Some(encoded) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map_err(|e| format!("invalid Base64: {e}"))?;
            String::from_utf8(bytes).map_err(|_| "Base64 value is not UTF-8".to_string())
        }
        None => Ok(raw.to_string()),
    }
}

/// A request-metadata header's value as a client writes it: plain when it can be, else the
/// `=?base64?...?=` sentinel form (non-ASCII, control characters, surrounding whitespace, or a
/// plain value that looks like the sentinel).
pub(crate) fn encode_header_value(value: &str) -> http::HeaderValue {
    let plain = !value.is_empty()
        && value.bytes().all(|b| (0x20..0x7f).contains(&b))
        && value.trim() == value
        && !(value.starts_with("=?base64?") && value.ends_with("?="));
    let text = if plain || value.is_empty() {
        value.to_string()
    } else {
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(value)
        )
    };
    // Printable ASCII or Base64: always a valid value.
    http::HeaderValue::from_str(&text).unwrap_or(http::HeaderValue::from_static(""))
}

/// A request-metadata header's one value. The same header twice with different values is
/// refused: a proxy that reads the other one would route the request differently.
pub(crate) fn header_str<'a>(
    headers: &'a HeaderMap,
    name: &str,
) -> Result<Option<&'a str>, GatewayError> {
    let mut values = headers.get_all(name).iter();
    let Some(first) = values.next() else {
        return Ok(None);
    };
    if values.any(|other| other != first) {
        return Err(GatewayError::HeaderMismatch(format!(
            "{name} header given more than once with different values"
        )));
    }
    first
        .to_str()
        .map(Some)
        .map_err(|_| GatewayError::HeaderMismatch(format!("{name} header has invalid characters")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_sentinel_is_decoded() {
        assert_eq!(decode_header_value("plain").unwrap(), "plain");
        assert_eq!(
            decode_header_value("=?base64?w6lsw6h2ZQ==?=").unwrap(),
            "élève"
        );
        assert!(decode_header_value("=?base64?***?=").is_err());
        for value in [
            "plain",
            "élève",
            " padded",
            "=?base64?x?=",
            "tab\there",
            "a/b:c",
        ] {
            let encoded = encode_header_value(value);
            assert_eq!(
                decode_header_value(encoded.to_str().unwrap()).unwrap(),
                value
            );
        }
        assert_eq!(encode_header_value("get_weather"), "get_weather");
        assert_eq!(encode_header_value("élève"), "=?base64?w6lsw6h2ZQ==?=");
    }
}
