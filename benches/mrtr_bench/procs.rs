//! The processes the benchmark starts, and what it reads about them.
//!
//! - [`ChildGuard`]: every child is stopped by its PID when the guard is dropped, on error paths
//!   too (a stop signal with a grace period where the program shuts down cleanly, then SIGKILL,
//!   then `wait`).
//! - [`BackendProcess`]: the fast legacy backend, this bench binary run again.
//! - [`GatewayProcess`]: the release `mrtr-gateway` binary (or the one `MRTR_BENCH_GATEWAY`
//!   names) with a generated configuration in a temporary directory; its address is read from
//!   the `serving` line it logs on stderr.
//! - [`NginxProcess`]: nginx as a reverse proxy to the backend, everything under a temporary
//!   prefix.
//! - Resident memory (`VmRSS`), the open-files limit, and version strings.
//!
//! Signals, rlimits and the clock tick are libc calls: the one place of the crate's targets,
//! with the stdio backend's SIGTERM, that needs `unsafe`.

#![allow(unsafe_code)]

use std::fs;
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::backend::SERVE_BACKEND_FLAG;
use crate::BenchResult;

/// The gateway binary cargo built for this bench (release profile).
pub const GATEWAY_EXE: &str = env!("CARGO_BIN_EXE_mrtr-gateway");
/// Names another gateway binary to measure (for example an earlier build, for before/after
/// figures); the stdio demo backend stays this build's.
const GATEWAY_OVERRIDE_VAR: &str = "MRTR_BENCH_GATEWAY";

/// The gateway binary the scenarios run: [`GATEWAY_OVERRIDE_VAR`], else [`GATEWAY_EXE`].
fn gateway_exe() -> PathBuf {
    std::env::var_os(GATEWAY_OVERRIDE_VAR).map_or_else(|| PathBuf::from(GATEWAY_EXE), PathBuf::from)
}
/// Where Debian puts nginx; `PATH` is searched when it is not there.
const NGINX_DEFAULT_PATH: &str = "/usr/sbin/nginx";
pub const START_TIMEOUT: Duration = Duration::from_secs(20);
const POLL_INTERVAL: Duration = Duration::from_millis(10);

/// A child process stopped by PID when dropped.
pub struct ChildGuard {
    name: String,
    child: Option<Child>,
    /// Sent first, for programs that clean up after themselves (nginx stops its workers).
    stop_signal: Option<libc::c_int>,
    grace: Duration,
}

impl ChildGuard {
    pub fn new(
        name: &str,
        child: Child,
        stop_signal: Option<libc::c_int>,
        grace: Duration,
    ) -> Self {
        Self {
            name: name.to_owned(),
            child: Some(child),
            stop_signal,
            grace,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Fails when the process has already exited.
    pub fn check_running(&mut self) -> BenchResult<()> {
        let name = self.name.clone();
        let Some(child) = self.child.as_mut() else {
            return Err(format!("{name} was already stopped").into());
        };
        match child.try_wait()? {
            Some(status) => Err(format!("{name} exited early: {status}").into()),
            None => Ok(()),
        }
    }

    /// Stops the process and reaps it. Returns how long it took to exit after the stop
    /// signal, or `None` when it had to be killed (or was gone already).
    pub fn stop(&mut self) -> Option<Duration> {
        let mut child = self.child.take()?;
        if let Ok(Some(_)) = child.try_wait() {
            return None;
        }
        if let (Some(signal), Ok(pid)) = (self.stop_signal, libc::pid_t::try_from(child.id())) {
            let signalled = Instant::now();
            // SAFETY: `pid` is our own child, not yet reaped, so the id cannot have been reused.
            unsafe { libc::kill(pid, signal) };
            while signalled.elapsed() < self.grace {
                if let Ok(Some(_)) = child.try_wait() {
                    return Some(signalled.elapsed());
                }
                std::thread::sleep(POLL_INTERVAL);
            }
            eprintln!(
                "mrtr-bench: {} did not exit within {:?}; killing it",
                self.name, self.grace
            );
        }
        let _ = child.kill();
        let _ = child.wait();
        None
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Raises the soft open-files limit to the hard limit (children inherit it). Returns the new
/// soft limit.
pub fn raise_open_files_limit() -> BenchResult<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid, writable rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    limit.rlim_cur = limit.rlim_max;
    // SAFETY: `limit` is a valid rlimit whose soft value does not exceed the hard value.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    Ok(limit.rlim_cur)
}

/// Resident memory of `pid` in KiB (`VmRSS` of /proc/PID/status).
pub fn rss_kib(pid: u32) -> BenchResult<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| format!("no VmRSS for pid {pid}").into())
}

/// CPU time (user + system) used so far by `pid` and its direct children that are still
/// running (nginx's workers), in microseconds.
pub fn cpu_time_us(pid: u32) -> BenchResult<u64> {
    let mut ticks = process_ticks(pid)?.1;
    for entry in fs::read_dir("/proc")?.flatten() {
        let Some(child) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if let Ok((parent, child_ticks)) = process_ticks(child) {
            if parent == pid {
                ticks += child_ticks;
            }
        }
    }
    Ok(ticks * 1_000_000 / clock_ticks_per_second())
}

/// CPU time (user + system) used so far, in microseconds: by `pid` itself (all its threads),
/// and by its descendants that are still running (the backends a stdio proxy spawned, through
/// a shell or not).
pub fn own_and_descendants_cpu_us(pid: u32) -> BenchResult<(u64, u64)> {
    let own = process_ticks(pid)?.1;
    let mut processes: Vec<(u32, u32, u64)> = Vec::new();
    for entry in fs::read_dir("/proc")?.flatten() {
        let Some(other) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if let Ok((parent, ticks)) = process_ticks(other) {
            processes.push((other, parent, ticks));
        }
    }
    // Breadth first from `pid`; bounded by the process list, each process visited once.
    let mut frontier = vec![pid];
    let mut descendants = 0;
    while let Some(parent) = frontier.pop() {
        for &(child, child_parent, ticks) in &processes {
            if child_parent == parent && child != pid {
                descendants += ticks;
                frontier.push(child);
            }
        }
    }
    let micros = |ticks: u64| ticks * 1_000_000 / clock_ticks_per_second();
    Ok((micros(own), micros(descendants)))
}

fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions.
    (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).max(1) as u64
}

/// (parent pid, utime + stime in clock ticks) from /proc/PID/stat.
fn process_ticks(pid: u32) -> BenchResult<(u32, u64)> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name may contain spaces; the fields after it do not.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let field = |index: usize| fields.get(index).and_then(|f| f.parse::<u64>().ok());
    match (field(1), field(11), field(12)) {
        (Some(parent), Some(user), Some(system)) => {
            Ok((u32::try_from(parent).unwrap_or_default(), user + system))
        }
        _ => Err(format!("unreadable /proc/{pid}/stat").into()),
    }
}

/// A free loopback port, for programs that cannot report the one they bound.
pub fn free_loopback_port() -> BenchResult<u16> {
    Ok(free_loopback_ports(1)?[0])
}

/// `count` distinct free loopback ports, for programs that must be told their port beforehand
/// (a fleet replica advertises it). All are bound at once, so none repeats, then released.
pub fn free_loopback_ports(count: usize) -> BenchResult<Vec<u16>> {
    let listeners = (0..count)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()?;
    listeners
        .iter()
        .map(|listener| Ok(listener.local_addr()?.port()))
        .collect()
}

pub fn temp_dir(prefix: &str) -> BenchResult<TempDir> {
    Ok(tempfile::Builder::new().prefix(prefix).tempdir()?)
}

/// The fast legacy backend in its own process.
pub struct BackendProcess {
    pub guard: ChildGuard,
    pub addr: SocketAddr,
}

impl BackendProcess {
    pub fn start() -> BenchResult<Self> {
        let exe = std::env::current_exe()?;
        let mut child = Command::new(exe)
            .args([SERVE_BACKEND_FLAG, "127.0.0.1:0"])
            // Kept open for the child's life: it exits when this pipe closes.
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdout = child.stdout.take();
        let mut guard = ChildGuard::new("backend", child, None, Duration::ZERO);
        let stdout = stdout.ok_or("backend: no stdout")?;
        let (sender, receiver) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = sender.send(line);
        });
        let line = receiver
            .recv_timeout(START_TIMEOUT)
            .map_err(|_| "backend did not report its address in time")?;
        guard.check_running()?;
        let addr = line
            .trim()
            .parse()
            .map_err(|_| format!("backend printed {line:?} instead of its address"))?;
        Ok(Self { guard, addr })
    }

    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }
}

/// The gateway binary with its configuration and log in a temporary directory.
pub struct GatewayProcess {
    pub guard: ChildGuard,
    pub addr: SocketAddr,
    pub admin: Option<SocketAddr>,
    log: PathBuf,
    /// Holds the configuration and the log until the gateway is gone.
    _dir: TempDir,
}

impl GatewayProcess {
    /// Starts the gateway with `config` (TOML; `server.listen` on port 0, or on one from
    /// [`free_loopback_ports`]) and waits for its `serving` line. `grace` is how long SIGTERM may take before SIGKILL.
    pub fn start(config: &str, grace: Duration) -> BenchResult<Self> {
        let dir = temp_dir("mrtr-bench-gateway-")?;
        let config_path = dir.path().join("gateway.toml");
        fs::write(&config_path, config)?;
        let log = dir.path().join("gateway.log");
        let child = Command::new(gateway_exe())
            .arg("--config")
            .arg(&config_path)
            .env("RUST_LOG", "info")
            .env_remove("MRTR_GATEWAY_LISTEN")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(&log)?)
            .spawn()?;
        let mut guard = ChildGuard::new("gateway", child, Some(libc::SIGTERM), grace);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let text = fs::read_to_string(&log).unwrap_or_default();
            if let Some(addr) = address_after(&text, "serving http://") {
                let admin = address_after(&text, "admin endpoints on http://");
                return Ok(Self {
                    guard,
                    addr,
                    admin,
                    log,
                    _dir: dir,
                });
            }
            wait_for_start(&mut guard, deadline, "gateway", &text)?;
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// The end of the gateway's log, for error reports.
    pub fn log_tail(&self) -> String {
        tail(&fs::read_to_string(&self.log).unwrap_or_default())
    }
}

/// The `ip:port` that follows `marker` on the first line containing it.
fn address_after(text: &str, marker: &str) -> Option<SocketAddr> {
    let line = text.lines().find(|line| line.contains(marker))?;
    let rest = &line[line.find(marker)? + marker.len()..];
    let end = rest.find(['/', ' ', ')']).unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// One poll of a process that has not announced its address yet: fails, with the end of its
/// log, if it exited or the deadline passed; otherwise waits a moment.
pub fn wait_for_start(
    guard: &mut ChildGuard,
    deadline: Instant,
    what: &str,
    log: &str,
) -> BenchResult<()> {
    if let Err(error) = guard.check_running() {
        return Err(format!("{what}: {error}; its log:\n{}", tail(log)).into());
    }
    if Instant::now() > deadline {
        return Err(format!("{what} did not start in time; its log:\n{}", tail(log)).into());
    }
    std::thread::sleep(POLL_INTERVAL);
    Ok(())
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// The nginx binary, if installed.
pub fn nginx_path() -> Option<PathBuf> {
    let default = Path::new(NGINX_DEFAULT_PATH);
    if default.is_file() {
        return Some(default.to_path_buf());
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("nginx"))
            .find(|candidate| candidate.is_file())
    })
}

/// `nginx version: nginx/1.22.1` → `nginx/1.22.1`.
pub fn nginx_version(nginx: &Path) -> String {
    Command::new(nginx)
        .arg("-v")
        .output()
        .map(|out| {
            let text = String::from_utf8_lossy(&out.stderr).trim().to_owned();
            text.strip_prefix("nginx version: ")
                .map(str::to_owned)
                .unwrap_or(text)
        })
        .unwrap_or_else(|error| format!("unknown ({error})"))
}

/// nginx proxying to the backend, with its pid file, logs and temp files under a temporary
/// prefix.
pub struct NginxProcess {
    /// Stops nginx (and with it its workers) when dropped.
    guard: ChildGuard,
    pub addr: SocketAddr,
    _dir: TempDir,
}

/// The workers nginx runs: one per core (`auto`), as the gateway's Tokio runtime runs one
/// worker thread per core.
pub const NGINX_WORKERS: &str = "auto";

impl NginxProcess {
    pub fn start(nginx: &Path, backend: SocketAddr) -> BenchResult<Self> {
        let dir = temp_dir("mrtr-bench-nginx-")?;
        // nginx started as root runs its workers as an unprivileged user; they must reach the
        // prefix.
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755))?;
        let port = free_loopback_port()?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let prefix = dir.path().display().to_string();
        let built_with = Command::new(nginx)
            .arg("-V")
            .output()
            .map(|out| String::from_utf8_lossy(&out.stderr).into_owned())
            .unwrap_or_default();
        // Temp paths only for the modules this nginx has, or the configuration is refused.
        let mut temp_paths = format!(
            "    client_body_temp_path {prefix}/client_body;\n    proxy_temp_path {prefix}/proxy;\n"
        );
        for module in ["fastcgi", "uwsgi", "scgi"] {
            if !built_with.contains(&format!("--without-http_{module}_module")) {
                temp_paths.push_str(&format!("    {module}_temp_path {prefix}/{module};\n"));
            }
        }
        let config = format!(
            "worker_processes {NGINX_WORKERS};\n\
             pid {prefix}/nginx.pid;\n\
             error_log {prefix}/error.log warn;\n\
             events {{ worker_connections 8192; }}\n\
             http {{\n\
             \x20   access_log off;\n\
             {temp_paths}\
             \x20   upstream mcp_backend {{\n\
             \x20       server {backend};\n\
             \x20       keepalive 128;\n\
             \x20   }}\n\
             \x20   server {{\n\
             \x20       listen {addr};\n\
             \x20       location / {{\n\
             \x20           proxy_pass http://mcp_backend;\n\
             \x20           proxy_http_version 1.1;\n\
             \x20           proxy_set_header Connection \"\";\n\
             \x20           proxy_buffering off;\n\
             \x20       }}\n\
             \x20   }}\n\
             }}\n"
        );
        let config_path = dir.path().join("nginx.conf");
        fs::write(&config_path, config)?;
        let error_log = dir.path().join("error.log");
        let child = Command::new(nginx)
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(&config_path)
            .arg("-e")
            .arg(&error_log)
            .args(["-g", "daemon off;"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        // SIGTERM makes the master stop its workers; SIGKILL would orphan them.
        let mut guard =
            ChildGuard::new("nginx", child, Some(libc::SIGTERM), Duration::from_secs(5));
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Ok(Self {
                    guard,
                    addr,
                    _dir: dir,
                });
            }
            let log = fs::read_to_string(&error_log).unwrap_or_default();
            wait_for_start(&mut guard, deadline, "nginx", &log)?;
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// The master process (its workers are its children).
    pub fn pid(&self) -> u32 {
        self.guard.pid()
    }
}

/// `mrtr-gateway --version`.
pub fn gateway_version() -> String {
    Command::new(gateway_exe())
        .arg("--version")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .unwrap_or_else(|error| format!("unknown ({error})"))
}
