//! The compile pool: the one place components are compiled to native code, bounded in
//! threads, queue and waiting time.
//!
//! Cranelift compiling a large or hostile component can take long, and a compile cannot
//! be interrupted. So compiles never run on a tokio worker or on the caller's thread:
//! they run on the pool's own threads, at most `workers` at a time, with at most
//! `queue` more waiting. The caller waits at most `timeout` for its result, queueing
//! included. A compile that outlives its caller's wait keeps its worker until it
//! finishes, so a flood of slow components fills the pool and later uploads are told
//! to come back ([`LoadError::CompilerBusy`]); it cannot take more threads, or more
//! cores, than the pool has. `precheck` bounds the shape of what is compiled before it
//! gets here, which bounds how long one compile can take.

use std::sync::mpsc::{self, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use wasmtime::Engine;

use crate::error::LoadError;

/// How many compiles may run and wait, and how long a caller waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompileLimits {
    /// Threads that compile (FORGE_PLUGIN_COMPILE_WORKERS).
    pub workers: usize,
    /// Compiles that may wait for a thread; beyond that, `CompilerBusy`.
    pub queue: usize,
    /// Longest a caller waits for its compile, queueing included
    /// (FORGE_PLUGIN_COMPILE_TIMEOUT_S).
    pub timeout: Duration,
}

impl Default for CompileLimits {
    fn default() -> Self {
        CompileLimits {
            workers: 1,
            queue: 4,
            timeout: Duration::from_secs(120),
        }
    }
}

/// What a worker runs: one compile, whose artifact (or error) it sends back itself.
type Job = Box<dyn FnOnce() + Send>;

/// Threads that turn component bytes into engine artifacts.
pub(crate) struct CompilePool {
    engine: Engine,
    jobs: SyncSender<Job>,
    limits: CompileLimits,
}

impl CompilePool {
    /// Start `limits.workers` threads compiling for `engine`. They end when the pool is
    /// dropped (after the compile they are running, if any).
    pub(crate) fn start(engine: &Engine, limits: CompileLimits) -> Result<Self, LoadError> {
        let (jobs, rx) = mpsc::sync_channel::<Job>(limits.queue);
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..limits.workers.max(1) {
            let rx = rx.clone();
            std::thread::Builder::new()
                .name(format!("forge-plugin-compile-{i}"))
                .spawn(move || work(&rx))
                .map_err(|e| LoadError::Compile(format!("starting the compile pool: {e}")))?;
        }
        Ok(CompilePool {
            engine: engine.clone(),
            jobs,
            limits,
        })
    }

    /// Compile `bytes` into this engine's artifact (what `Component::deserialize`
    /// reads), waiting at most the pool's timeout.
    pub(crate) fn compile(&self, bytes: &[u8]) -> Result<Vec<u8>, LoadError> {
        let (engine, bytes) = (self.engine.clone(), bytes.to_vec());
        self.run(move || {
            engine
                .precompile_component(&bytes)
                .map_err(|e| format!("{e:#}"))
        })
    }

    /// Run `f` on a worker, waiting at most the pool's timeout for its result.
    fn run<F>(&self, f: F) -> Result<Vec<u8>, LoadError>
    where
        F: FnOnce() -> Result<Vec<u8>, String> + Send + 'static,
    {
        let (reply, result) = mpsc::channel();
        let job: Job = Box::new(move || {
            // The caller may have stopped waiting: the result is then dropped unused.
            let _ = reply.send(f());
        });
        self.jobs.try_send(job).map_err(|e| match e {
            TrySendError::Full(_) => LoadError::CompilerBusy {
                running: self.limits.workers.max(1),
                waiting: self.limits.queue,
            },
            TrySendError::Disconnected(_) => LoadError::Compile("the compile pool stopped".into()),
        })?;
        match result.recv_timeout(self.limits.timeout) {
            Ok(artifact) => artifact.map_err(LoadError::Compile),
            Err(RecvTimeoutError::Timeout) => Err(LoadError::CompileTimeout {
                seconds: self.limits.timeout.as_secs(),
            }),
            Err(RecvTimeoutError::Disconnected) => Err(LoadError::Compile(
                "the compiling thread ended without a result".into(),
            )),
        }
    }
}

/// One worker: run jobs until the pool is dropped.
fn work(jobs: &Mutex<mpsc::Receiver<Job>>) {
    loop {
        // The lock is held only while waiting for the next job, never while compiling.
        let next = match jobs.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => return,
        };
        let Ok(job) = next else {
            return;
        };
        job();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtime::Config;

    fn engine() -> Engine {
        let mut c = Config::new();
        c.wasm_component_model(true);
        Engine::new(&c).expect("engine")
    }

    fn empty_component() -> Vec<u8> {
        wat::parse_str("(component)").expect("wat")
    }

    #[test]
    fn compiles_on_the_pool_and_reports_errors() {
        let e = engine();
        let pool = CompilePool::start(&e, CompileLimits::default()).expect("pool");
        let artifact = pool.compile(&empty_component()).expect("compiled");
        // SAFETY: produced just now by this engine.
        unsafe { wasmtime::component::Component::deserialize(&e, &artifact) }.expect("loads");
        let err = pool.compile(b"\0asm garbage").expect_err("garbage");
        assert!(matches!(err, LoadError::Compile(_)), "{err:?}");
    }

    /// Occupies the pool's worker until the returned sender is dropped.
    fn occupy(pool: &CompilePool) -> mpsc::Sender<()> {
        let (release, held) = mpsc::channel::<()>();
        let (started_tx, started) = mpsc::channel::<()>();
        let job: Job = Box::new(move || {
            let _ = started_tx.send(());
            let _ = held.recv();
        });
        pool.jobs.try_send(job).expect("a free worker");
        started.recv().expect("the worker took the job");
        release
    }

    #[test]
    fn a_caller_waits_at_most_the_timeout_and_a_full_queue_refuses() {
        let e = engine();
        let limits = CompileLimits {
            workers: 1,
            queue: 1,
            timeout: Duration::from_millis(50),
        };
        let pool = Arc::new(CompilePool::start(&e, limits).expect("pool"));
        let release = occupy(&pool);
        // Queued behind the busy worker: the caller gives up at the timeout.
        let err = pool.compile(&empty_component()).expect_err("timed out");
        assert!(matches!(err, LoadError::CompileTimeout { .. }), "{err:?}");
        // That job still holds the queue's one place: the next is refused at once.
        let err = pool.compile(&empty_component()).expect_err("busy");
        assert!(
            matches!(
                err,
                LoadError::CompilerBusy {
                    running: 1,
                    waiting: 1
                }
            ),
            "{err:?}"
        );
        // Once the worker is free again (it first runs the abandoned job still in the
        // queue), compiles succeed. Until then a call is refused at once or times out:
        // retried for a while, never in a busy loop.
        drop(release);
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let mut last = None;
        while std::time::Instant::now() < deadline {
            match pool.compile(&empty_component()) {
                Ok(_) => return,
                Err(e) => last = Some(e),
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("the pool did not recover: {last:?}");
    }
}
