//! Opening a hostile `requestState`: any string is rejected or opened, never a crash; and a
//! token sealed here always opens to what was sealed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mrtr_gateway::state::{KeyRing, StatePayload};

const KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

fuzz_target!(|data: &[u8]| {
    let Ok(ring) = KeyRing::from_base64(&[KEY]) else {
        return;
    };
    let _ = ring.open(&String::from_utf8_lossy(data));
    // Real held ids are 32 hex digits; a short arbitrary one keeps the token under the length
    // a hostile state may have.
    let payload = StatePayload {
        held_id: String::from_utf8_lossy(&data[..data.len().min(64)]).into_owned(),
        owner: "fuzz".into(),
        owner_address: None,
        route: "/mcp".into(),
        principal: "p".into(),
        method: "tools/call".into(),
        params_digest: "d".into(),
        round: data.len() as u32,
        expires_ms: 1,
    };
    assert_eq!(ring.open(&ring.seal(&payload)), Ok(payload));
});
