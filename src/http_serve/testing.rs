//! Test utilities of the HTTP unit tests of both eras.

use http::{HeaderMap, HeaderValue};

/// A header map from name/value pairs; repeated names append.
pub(crate) fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        if let Ok(value) = HeaderValue::from_str(value) {
            map.append(*name, value);
        }
    }
    map
}
