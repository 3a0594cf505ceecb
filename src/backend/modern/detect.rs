//! A backend's era: fixed by `era`, or probed as 2026-07-28 tells a client to (versioning:
//! backward compatibility): `server/discover` answered, or refused with an error only a
//! 2026-07-28 server sends, means modern; any other answer, closing, or silence means legacy.
//! A dual-era server answers the probe, so it is used as modern. The verdict is remembered until
//! forgotten (the backend restarted or started failing), then probed again by the next request.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwapOption;
use serde_json::{json, Value};

use super::{ModernEvent, ModernRequest, MODERN_VERSION};
use crate::backend::BackendError;
use crate::config::BackendEra;
use crate::jsonrpc::codes;
use crate::protocol::{META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION};

/// What a backend speaks, once decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResolvedEra {
    Modern,
    Legacy,
}

impl ResolvedEra {
    /// The revision's date, as `/status` and the metrics show it.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Modern => MODERN_VERSION,
            Self::Legacy => crate::protocol::BACKEND_PROTOCOL_VERSION,
        }
    }
}

/// What one probe found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Modern,
    Legacy,
}

/// A backend's era: configured, or detected and remembered.
#[derive(Debug)]
pub(crate) struct EraCell {
    configured: BackendEra,
    /// Read by every request; written by a probe or `forget`.
    detected: ArcSwapOption<ResolvedEra>,
    /// Set by `forget`: the verdict stands for `known` (readiness, status) until the next
    /// request probes again.
    stale: AtomicBool,
    /// One probe at a time: the others wait for its verdict.
    probing: tokio::sync::Mutex<()>,
}

impl EraCell {
    pub(crate) fn new(configured: BackendEra) -> Self {
        Self {
            configured,
            detected: ArcSwapOption::empty(),
            stale: AtomicBool::new(false),
            probing: tokio::sync::Mutex::new(()),
        }
    }

    /// The era: configured, remembered, or found by `probe` (one probe at a time; an error
    /// decides nothing and is remembered by nobody).
    pub(crate) async fn resolve<F, P>(&self, probe: F) -> Result<ResolvedEra, BackendError>
    where
        F: FnOnce() -> P,
        P: std::future::Future<Output = Result<Verdict, BackendError>>,
    {
        if let Some(era) = self.settled() {
            return Ok(era);
        }
        let _probing = self.probing.lock().await;
        if let Some(era) = self.settled() {
            return Ok(era);
        }
        let era = match probe().await? {
            Verdict::Modern => ResolvedEra::Modern,
            Verdict::Legacy => ResolvedEra::Legacy,
        };
        self.detected.store(Some(Arc::new(era)));
        self.stale.store(false, Ordering::Release);
        Ok(era)
    }

    /// The era if it is configured, or detected and not forgotten since.
    fn settled(&self) -> Option<ResolvedEra> {
        match self.configured {
            BackendEra::Auto if self.stale.load(Ordering::Acquire) => None,
            _ => self.known(),
        }
    }

    /// The era if it is configured, or the last one detected.
    pub(crate) fn known(&self) -> Option<ResolvedEra> {
        match self.configured {
            BackendEra::Modern => Some(ResolvedEra::Modern),
            BackendEra::Legacy => Some(ResolvedEra::Legacy),
            BackendEra::Auto => self.detected.load().as_deref().copied(),
        }
    }

    /// Asks the next request to probe again; a configured era stays.
    pub(crate) fn forget(&self) {
        self.stale.store(true, Ordering::Release);
    }
}

/// The probe: `server/discover` declaring no capabilities.
pub(crate) fn discover_request() -> ModernRequest {
    ModernRequest {
        method: "server/discover".into(),
        params: json!({
            "_meta": {
                META_PROTOCOL_VERSION: MODERN_VERSION,
                META_CLIENT_CAPABILITIES: {},
            }
        }),
        name: None,
        headers: Vec::new(),
    }
}

/// What an answer to the probe says about the backend.
pub(crate) fn verdict_of(answer: ModernEvent) -> Verdict {
    let names_modern = |versions: Option<&Value>| {
        versions
            .and_then(Value::as_array)
            .is_some_and(|v| v.iter().any(|v| v == MODERN_VERSION))
    };
    match answer {
        ModernEvent::Result(result) => match serde_json::from_str::<Value>(result.get()) {
            Ok(result) if names_modern(result.get("supportedVersions")) => Verdict::Modern,
            _ => Verdict::Legacy,
        },
        ModernEvent::Error { error } => match error.code {
            // Only a 2026-07-28 server checks the request-metadata headers or a request's
            // own capabilities.
            codes::HEADER_MISMATCH | codes::MISSING_CLIENT_CAPABILITY => Verdict::Modern,
            // A modern server that does not speak this revision; a legacy one naming what it
            // speaks (as servers built on current SDKs do) is legacy.
            codes::UNSUPPORTED_PROTOCOL_VERSION
                if names_modern(error.data.as_ref().and_then(|d| d.get("supported"))) =>
            {
                Verdict::Modern
            }
            _ => Verdict::Legacy,
        },
        ModernEvent::Notify(_) => Verdict::Legacy,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc::JsonRpcError;

    fn error(code: i64, data: Option<Value>) -> ModernEvent {
        let mut error = JsonRpcError::new(code, "x");
        error.data = data;
        ModernEvent::Error { error }
    }

    #[test]
    fn answers_decide_the_era() {
        let discover = json!({"resultType": "complete", "supportedVersions": ["2026-07-28"],
            "capabilities": {}, "ttlMs": 0, "cacheScope": "public"});
        let result = ModernEvent::Result(crate::jsonrpc::raw(&discover));
        assert_eq!(verdict_of(result), Verdict::Modern);
        let other = ModernEvent::Result(crate::jsonrpc::raw(
            &json!({"supportedVersions": ["2027-01-01"]}),
        ));
        assert!(matches!(verdict_of(other), Verdict::Legacy));
        assert!(matches!(verdict_of(error(-32020, None)), Verdict::Modern));
        assert!(matches!(verdict_of(error(-32021, None)), Verdict::Modern));
        let supported = |v: Value| Some(json!({"supported": v, "requested": "2026-07-28"}));
        assert!(matches!(
            verdict_of(error(
                -32022,
                supported(json!(["2026-07-28", "2025-11-25"]))
            )),
            Verdict::Modern
        ));
        // rmcp and the TypeScript SDK 1.x answer a legacy server's way, naming 2025 revisions.
        assert!(matches!(
            verdict_of(error(
                -32022,
                supported(json!(["2025-06-18", "2025-11-25"]))
            )),
            Verdict::Legacy
        ));
        assert!(matches!(verdict_of(error(-32601, None)), Verdict::Legacy));
        assert!(matches!(verdict_of(error(-32000, None)), Verdict::Legacy));
    }

    #[tokio::test]
    async fn a_verdict_is_kept_until_forgotten_and_a_configured_era_always() {
        let cell = EraCell::new(BackendEra::Auto);
        assert_eq!(cell.known(), None);
        let probed = cell
            .resolve(|| async { Ok(Verdict::Modern) })
            .await
            .unwrap();
        assert_eq!(probed, ResolvedEra::Modern);
        // Remembered: no second probe.
        let again = cell
            .resolve(|| async { Err(BackendError::Connect("not probed".into())) })
            .await
            .unwrap();
        assert_eq!(again, ResolvedEra::Modern);
        cell.forget();
        assert!(cell
            .resolve(|| async { Err(BackendError::Connect("down".into())) })
            .await
            .is_err());
        // An error decided nothing: the last verdict still stands for readiness, and the next
        // request probes again.
        assert_eq!(cell.known(), Some(ResolvedEra::Modern));
        let now_legacy = cell
            .resolve(|| async { Ok(Verdict::Legacy) })
            .await
            .unwrap();
        assert_eq!(now_legacy, ResolvedEra::Legacy);
        assert_eq!(cell.known(), Some(ResolvedEra::Legacy));
        let fixed = EraCell::new(BackendEra::Legacy);
        fixed.forget();
        assert_eq!(fixed.known(), Some(ResolvedEra::Legacy));
    }
}
