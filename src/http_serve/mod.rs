//! The HTTP pieces both eras serve with, below either of them: reading a request body within
//! its limits and checking its media types ([`body`]), request headers ([`headers`]), JSON and
//! error responses with their metric labels ([`response`]), and server-sent events ([`sse`]).

pub(crate) mod body;
pub(crate) mod headers;
mod response;
mod sse;
#[cfg(test)]
pub(crate) mod testing;

pub(crate) use self::body::{accepts, MediaTypes, ReadBodyLayer};
pub(crate) use self::headers::{decode_header_value, encode_header_value, header_str};
pub(crate) use self::response::{
    empty, error_outcome, error_response, full, json_bytes_response, json_response, labeled,
    labeled_in, not_found, panicked, scope_challenge, Body, Labels,
};
pub(crate) use self::sse::{answer_early, sse_event, sse_frame, sse_response, KEEP_ALIVE};
