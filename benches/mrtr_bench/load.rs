//! The load drivers and their statistics.
//!
//! - [`run_timed`]: N tasks call an operation back to back for a fixed time after a warm-up
//!   (throughput and latency at fixed concurrency).
//! - [`run_jobs`]: N tasks share a fixed list of jobs (a counted run, or opening and retrying
//!   rounds), keeping each job's output.
//!
//! Latencies of successful operations go into an `hdrhistogram` in microseconds; failures are
//! counted and the first one is kept for the report.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::BenchResult;

/// Latencies from 1 µs to 2 minutes, 3 significant digits.
fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 120_000_000, 3)
        .expect("constant bounds: 1 µs to 2 min at 3 significant digits")
}

/// What one run measured.
#[derive(Clone)]
pub struct LoadStats {
    pub completed: u64,
    pub errors: u64,
    /// The measured window (not counting the warm-up).
    pub elapsed: Duration,
    pub latencies_us: Histogram<u64>,
    pub first_error: Option<String>,
}

impl LoadStats {
    /// Merges every worker's figures; a worker that panicked counts as one error.
    async fn join_workers(&mut self, tasks: &mut tokio::task::JoinSet<LoadStats>) {
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok(worker) => self.merge(worker),
                Err(error) => {
                    self.errors += 1;
                    self.first_error
                        .get_or_insert(format!("task failed: {error}"));
                }
            }
        }
    }

    /// No operation yet; also one task's share of a run (its window is left at zero).
    pub fn empty() -> Self {
        Self {
            completed: 0,
            errors: 0,
            elapsed: Duration::ZERO,
            latencies_us: new_histogram(),
            first_error: None,
        }
    }

    pub fn per_second(&self) -> f64 {
        let seconds = self.elapsed.as_secs_f64();
        if seconds > 0.0 {
            self.completed as f64 / seconds
        } else {
            0.0
        }
    }

    pub fn p50_us(&self) -> u64 {
        self.latencies_us.value_at_quantile(0.50)
    }

    pub fn p99_us(&self) -> u64 {
        self.latencies_us.value_at_quantile(0.99)
    }

    /// Counts one operation started at `started`: its latency if it succeeded, else its error.
    pub fn record<T>(&mut self, started: Instant, outcome: &BenchResult<T>) {
        match outcome {
            Ok(_) => {
                self.completed += 1;
                let micros = started.elapsed().as_micros().max(1);
                self.latencies_us
                    .saturating_record(u64::try_from(micros).unwrap_or(u64::MAX));
            }
            Err(error) => self.record_error(error.to_string()),
        }
    }

    /// Counts one failed operation.
    pub fn record_error(&mut self, error: String) {
        self.errors += 1;
        self.first_error.get_or_insert(error);
    }

    /// Adds `other`'s operations (not its window).
    pub fn merge(&mut self, other: LoadStats) {
        self.completed += other.completed;
        self.errors += other.errors;
        // Both histograms have the same bounds, so adding cannot fail.
        let _ = self.latencies_us.add(&other.latencies_us);
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
    }
}

/// Runs `operation` from `concurrency` tasks back to back: `warmup` unmeasured, then `measure`.
/// Only operations started inside the measured window count. The argument is a run-wide
/// sequence number, usable as a JSON-RPC id.
pub async fn run_timed<F, Fut>(
    concurrency: usize,
    warmup: Duration,
    measure: Duration,
    operation: F,
) -> LoadStats
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = BenchResult<()>> + Send + 'static,
{
    let operation = Arc::new(operation);
    let sequence = Arc::new(AtomicU64::new(1));
    let start = Instant::now();
    let measure_from = start + warmup;
    let measure_until = measure_from + measure;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let operation = operation.clone();
        let sequence = sequence.clone();
        tasks.spawn(async move {
            let mut worker = LoadStats::empty();
            loop {
                let started = Instant::now();
                if started >= measure_until {
                    break;
                }
                let outcome = operation(sequence.fetch_add(1, Ordering::Relaxed)).await;
                if started >= measure_from {
                    worker.record(started, &outcome);
                }
            }
            worker
        });
    }
    let mut stats = LoadStats::empty();
    stats.elapsed = measure;
    stats.join_workers(&mut tasks).await;
    stats
}

/// Runs `operation` once per job, from `concurrency` tasks. Returns the statistics (the window
/// is the whole run) and the outputs of the jobs that succeeded, in no particular order.
pub async fn run_jobs<J, T, F, Fut>(
    concurrency: usize,
    jobs: Vec<J>,
    operation: F,
) -> (LoadStats, Vec<T>)
where
    J: Send + 'static,
    T: Send + 'static,
    F: Fn(J) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = BenchResult<T>> + Send,
{
    let outputs = Arc::new(Mutex::new(Vec::with_capacity(jobs.len())));
    let jobs = Arc::new(Mutex::new(jobs.into_iter()));
    let operation = Arc::new(operation);
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..concurrency.max(1) {
        let (jobs, outputs, operation) = (jobs.clone(), outputs.clone(), operation.clone());
        tasks.spawn(async move {
            let mut worker = LoadStats::empty();
            // Bounded by the job list.
            while let Some(job) = next_job(&jobs) {
                let started = Instant::now();
                let outcome = operation(job).await;
                worker.record(started, &outcome);
                if let Ok(output) = outcome {
                    outputs
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(output);
                }
            }
            worker
        });
    }
    let mut stats = LoadStats::empty();
    stats.join_workers(&mut tasks).await;
    stats.elapsed = start.elapsed();
    let outputs = std::mem::take(&mut *outputs.lock().unwrap_or_else(PoisonError::into_inner));
    (stats, outputs)
}

fn next_job<J>(jobs: &Mutex<std::vec::IntoIter<J>>) -> Option<J> {
    jobs.lock().unwrap_or_else(PoisonError::into_inner).next()
}
