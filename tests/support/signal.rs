//! Signals to processes a test started (the gateway binary, or backends it spawned), by PID.

#![allow(unsafe_code)]

/// Sends `signal` to `pid`; a process already gone is not an error for a test.
pub fn send(pid: i32, signal: libc::c_int) {
    // SAFETY: kill(2) only reads its two integer arguments.
    unsafe {
        libc::kill(pid, signal);
    }
}
