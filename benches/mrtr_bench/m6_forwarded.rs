//! M6, a forwarded retry against a local one: two gateways, A and B, replicas of one fleet
//! (`[fleet]`, the same key) in front of one fast backend.
//!
//! Each exchange opens its round on A, untimed; only its retry is timed. Sent to A, the replica
//! holding the call, the retry is local. Sent to B, it is forwarded: B finds in the sealed
//! `requestState` that A owns the call, relays the request to A over a pooled connection and
//! streams A's answer back. One retry at a time; the paths alternate exchange by exchange in
//! ABBA order (after a warm-up of both), so drift on the machine weighs on both alike.

use std::time::{Duration, Instant};

use http::Uri;

use crate::gateway_config::{FleetSetting, HttpGatewayConfig, FLEET_TEST_KEY};
use crate::load::LoadStats;
use crate::procs::{free_loopback_ports, BackendProcess, GatewayProcess};
use crate::rounds::{admin_get, finish_round, open_round, wait_ready};
use crate::wire::{new_client, HttpClient};
use crate::BenchResult;

pub struct Settings {
    /// Unmeasured exchanges per path before the measured ones.
    pub warmup: usize,
    /// Measured exchanges per path.
    pub exchanges: usize,
}

/// The goal: a forwarded retry's p50 at most this much above a local one's.
pub const GOAL_P50_ADDED_US: i64 = 300;
/// `fleet.peer_timeout` of both replicas (the default).
const PEER_TIMEOUT_MS: u64 = 2_000;
/// The counter of retries a replica forwarded, with the label of those the owner answered.
const FORWARDED_OK_METRIC: &str = "mrtr_forwarded_retries_total{result=\"ok\"}";

pub struct Results {
    pub warmup: usize,
    /// Retries sent to A, which holds their call.
    pub local: LoadStats,
    /// Retries sent to B, which forwards them to A.
    pub forwarded: LoadStats,
    /// B's count of retries it forwarded and A answered, warm-up included (`None`: unreadable).
    pub forwarded_by_b: Option<u64>,
    /// Retries through B that got the right answer, warm-up included.
    pub forwarded_succeeded: u64,
}

impl Results {
    pub fn p50_added_us(&self) -> i64 {
        self.forwarded.p50_us() as i64 - self.local.p50_us() as i64
    }

    pub fn p99_added_us(&self) -> i64 {
        self.forwarded.p99_us() as i64 - self.local.p99_us() as i64
    }

    pub fn goal_met(&self) -> bool {
        self.local.completed > 0
            && self.forwarded.completed > 0
            && self.p50_added_us() <= GOAL_P50_ADDED_US
    }
}

/// The two paths, as indexes into the targets and the statistics.
const LOCAL: usize = 0;
const FORWARDED: usize = 1;

pub async fn run(settings: &Settings) -> BenchResult<Results> {
    let backend = BackendProcess::start()?;
    // `fleet.advertise` must name the port each replica really listens on.
    let ports = free_loopback_ports(2)?;
    let replica = |port: u16| {
        let mut config = HttpGatewayConfig::new(backend.url());
        // The opening of each round is not measured; no need to wait for more questions.
        config.settle_window_ms = Some(0);
        config.admin = true;
        config.fleet = Some(FleetSetting {
            port,
            key: FLEET_TEST_KEY.to_owned(),
            peer_timeout_ms: PEER_TIMEOUT_MS,
        });
        GatewayProcess::start(&config.to_toml(), Duration::from_secs(10))
    };
    let owner = replica(ports[0])?;
    let forwarder = replica(ports[1])?;
    let client = new_client();
    for gateway in [&owner, &forwarder] {
        let admin = gateway
            .admin
            .ok_or("a replica did not report its admin address")?;
        wait_ready(&client, admin, Duration::from_secs(20)).await?;
    }
    let owner_uri: Uri = owner.url().parse()?;
    let paths = Paths {
        targets: [owner_uri.clone(), forwarder.url().parse()?],
        owner: owner_uri,
        client: client.clone(),
    };

    let mut warmup = [LoadStats::empty(), LoadStats::empty()];
    paths.exchanges(settings.warmup, 1, &mut warmup).await;
    let mut measured = [LoadStats::empty(), LoadStats::empty()];
    let started = Instant::now();
    paths
        .exchanges(settings.exchanges, 1_000_001, &mut measured)
        .await;
    let elapsed = started.elapsed();
    let forwarded_succeeded = warmup[FORWARDED].completed + measured[FORWARDED].completed;
    // Failures during the warm-up count too: they are failures.
    for (stats, warm) in measured.iter_mut().zip(&warmup) {
        stats.elapsed = elapsed;
        stats.errors += warm.errors;
        if stats.first_error.is_none() {
            stats.first_error.clone_from(&warm.first_error);
        }
    }
    let forwarded_by_b = match forwarder.admin {
        Some(admin) => forwarded_ok(&client, admin).await.ok(),
        None => None,
    };
    if measured.iter().any(|stats| stats.errors > 0) {
        for (gateway, name) in [(&owner, "A"), (&forwarder, "B")] {
            eprintln!(
                "mrtr-bench: M6 replica {name}'s log:\n{}",
                gateway.log_tail()
            );
        }
    }
    let [local, forwarded] = measured;
    let results = Results {
        warmup: settings.warmup,
        local,
        forwarded,
        forwarded_by_b,
        forwarded_succeeded,
    };
    for (label, stats) in [
        ("local (retry to A, which holds the call)", &results.local),
        ("forwarded (retry to B, forwarded to A)", &results.forwarded),
    ] {
        eprintln!(
            "mrtr-bench: M6 {label}: {} retries  p50 {} µs  p99 {} µs  errors {}",
            stats.completed,
            stats.p50_us(),
            stats.p99_us(),
            stats.errors
        );
    }
    eprintln!(
        "mrtr-bench: M6 forwarded − local: p50 {:+} µs (goal ≤ +{GOAL_P50_ADDED_US} µs), p99 {:+} µs; B forwarded {}",
        results.p50_added_us(),
        results.p99_added_us(),
        results
            .forwarded_by_b
            .map_or_else(|| "n/a".to_owned(), |n| n.to_string()),
    );
    Ok(results)
}

/// Where rounds are opened (A) and where each path sends the retry.
struct Paths {
    client: HttpClient,
    owner: Uri,
    /// By path: A for [`LOCAL`], B for [`FORWARDED`].
    targets: [Uri; 2],
}

impl Paths {
    /// `count` exchanges per path, alternating the paths in ABBA order. Each opens its round on
    /// the owner (untimed) and times the retry sent to the path's target; ids start at
    /// `first_id` and step by 2 (a round uses id and id + 1).
    async fn exchanges(&self, count: usize, first_id: u64, stats: &mut [LoadStats; 2]) {
        for n in 0..count as u64 {
            let order = if n % 2 == 0 {
                [LOCAL, FORWARDED]
            } else {
                [FORWARDED, LOCAL]
            };
            for (slot, path) in (0u64..).zip(order) {
                let id = first_id + 4 * n + 2 * slot;
                match open_round(&self.client, &self.owner, id).await {
                    Ok(round) => {
                        let started = Instant::now();
                        let outcome = finish_round(&self.client, &self.targets[path], &round).await;
                        stats[path].record(started, &outcome);
                    }
                    Err(error) => {
                        stats[path].record_error(format!("opening the round on A: {error}"));
                    }
                }
            }
        }
    }
}

/// A replica's count of retries it forwarded and their owner answered, from `/metrics`.
async fn forwarded_ok(client: &HttpClient, admin: std::net::SocketAddr) -> BenchResult<u64> {
    let (_, body) = admin_get(client, admin, "/metrics").await?;
    body.lines()
        .find_map(|line| line.strip_prefix(FORWARDED_OK_METRIC))
        .and_then(|value| value.trim().parse::<f64>().ok())
        .map(|value| value as u64)
        .ok_or_else(|| format!("/metrics without {FORWARDED_OK_METRIC}").into())
}
