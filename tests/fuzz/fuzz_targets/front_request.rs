//! Front-door parsing and validation of a POST: any body with any of a few header sets must be
//! accepted or rejected, never crash.
#![no_main]

use http::{HeaderMap, HeaderValue};
use libfuzzer_sys::fuzz_target;
use mrtr_gateway::internals::{check_media_types, decode_header_value, parse};

fuzz_target!(|data: &[u8]| {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    let mut headers = HeaderMap::new();
    headers.insert("content-type", HeaderValue::from_static("application/json"));
    headers.insert("accept", HeaderValue::from_static("application/json, text/event-stream"));
    if selector & 1 == 0 {
        headers.insert("mcp-protocol-version", HeaderValue::from_static("2026-07-28"));
    }
    if selector & 2 == 0 {
        headers.insert("mcp-method", HeaderValue::from_static("tools/call"));
    }
    // Part of the input becomes the Mcp-Name header, when it is a valid header value.
    let split = body.len().min(usize::from(selector >> 2));
    let (name, body) = body.split_at(split);
    if let Ok(value) = HeaderValue::from_bytes(name) {
        if let Ok(text) = value.to_str() {
            let _ = decode_header_value(text);
        }
        headers.insert("mcp-name", value);
    }
    let _ = check_media_types(&headers);
    let _ = parse(&headers, body);
});
