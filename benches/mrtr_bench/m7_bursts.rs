//! M7, memory after bursts: waves of held rounds nobody retries. One backend and one gateway for
//! the whole run. Each wave opens its rounds, reads the gateway's resident memory at the peak,
//! and waits until every round has expired. After the last wave the memory is sampled for a
//! while: the figure is how close it comes back to the baseline, read before the first wave.

use std::time::{Duration, Instant};

use crate::load::{run_jobs, LoadStats};
use crate::procs::rss_kib;
use crate::rounds::{admin_get, held_calls, open_round, start_for_held_rounds, HeldSetup};
use crate::BenchResult;

pub struct Settings {
    pub waves: usize,
    pub rounds: usize,
    pub open_concurrency: usize,
    /// `mrtr.held_ttl`: how soon a wave's rounds expire.
    pub held_ttl_s: u64,
    /// How long memory is sampled after the last wave expired, and how often.
    pub settle: Duration,
    pub sample_every: Duration,
}

pub struct Wave {
    pub opened: LoadStats,
    pub peak_kib: u64,
    /// When the wave's last round had expired.
    pub expired_kib: u64,
}

pub struct Results {
    pub rounds: usize,
    pub held_ttl_s: u64,
    pub baseline_kib: u64,
    pub waves: Vec<Wave>,
    /// (time after the last expiry, RSS) after the last wave.
    pub settling: Vec<(Duration, u64)>,
    /// The gateway's `/status` at the end.
    pub status_at_end: String,
}

impl Results {
    /// The last sample over the baseline.
    pub fn settled_ratio(&self) -> f64 {
        let last = self.settling.last().map_or(0, |(_, kib)| *kib);
        last as f64 / self.baseline_kib.max(1) as f64
    }
}

/// The rounds a wave may still have held after their expiry, then none.
const EXPIRY_GRACE: Duration = Duration::from_secs(15);

pub async fn run(settings: &Settings) -> BenchResult<Results> {
    let HeldSetup {
        backend,
        mut gateway,
        admin,
        uri,
        client,
    } = start_for_held_rounds(settings.rounds, settings.held_ttl_s).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pid = gateway.guard.pid();
    let baseline_kib = rss_kib(pid)?;
    let mut waves = Vec::new();
    let mut next_id = 1_000_001;
    for wave in 0..settings.waves {
        let ids: Vec<u64> = (0..settings.rounds as u64)
            .map(|n| next_id + 2 * n)
            .collect();
        next_id += 2 * settings.rounds as u64;
        let (open_client, open_uri) = (client.clone(), uri.clone());
        let (opened, _rounds) = run_jobs(settings.open_concurrency, ids, move |id: u64| {
            let (client, uri) = (open_client.clone(), open_uri.clone());
            async move { open_round(&client, &uri, id).await }
        })
        .await;
        let peak_kib = rss_kib(pid)?;
        // Nobody retries: every round expires after `held_ttl`.
        let deadline = Instant::now() + Duration::from_secs(settings.held_ttl_s) + EXPIRY_GRACE;
        while held_calls(&client, admin).await? > 0 {
            if Instant::now() > deadline {
                return Err(format!("M7 wave {wave}: rounds still held past their expiry").into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let expired_kib = rss_kib(pid)?;
        eprintln!(
            "mrtr-bench: M7 wave {}: {} rounds, RSS {baseline_kib} → {peak_kib} KiB at the peak, {expired_kib} KiB once expired",
            wave + 1,
            opened.completed
        );
        waves.push(Wave {
            opened,
            peak_kib,
            expired_kib,
        });
    }
    let mut settling = Vec::new();
    let started = Instant::now();
    while started.elapsed() < settings.settle {
        tokio::time::sleep(settings.sample_every).await;
        settling.push((started.elapsed(), rss_kib(pid)?));
    }
    let (_, status_at_end) = admin_get(&client, admin, "/status").await?;
    eprintln!("mrtr-bench: M7 /status at the end: {status_at_end}");
    if let Err(error) = gateway.guard.check_running() {
        return Err(format!("{error}; its log:\n{}", gateway.log_tail()).into());
    }
    drop(client);
    gateway.guard.stop();
    drop(gateway);
    drop(backend);
    Ok(Results {
        rounds: settings.rounds,
        held_ttl_s: settings.held_ttl_s,
        baseline_kib,
        waves,
        settling,
        status_at_end,
    })
}
