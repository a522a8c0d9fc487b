//! The change feeds: a dedicated connection (notifications need one that is never
//! handed to other queries) that `LISTEN`s on [`super::POLICY_CHANNEL`] (a policy
//! version appended), [`super::QUEUE_CHANNEL`] (a job queued) and
//! [`super::JOBS_CHANNEL`] (a state change recorded) and bumps a counter
//! per channel on every notification. When the connection fails it reconnects with a
//! growing delay and bumps every counter once more (a change may have been missed while
//! it was down); readers then look again, and their polling covers the gap.

use std::time::Duration;

use futures::StreamExt;
use tokio::sync::watch;
use tokio_postgres::AsyncMessage;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::{JOBS_CHANNEL, POLICY_CHANNEL, QUEUE_CHANNEL};

/// Longest wait between two reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// The feeds' receivers: each changes on every notification of its channel (and
/// after every reconnection).
#[derive(Debug, Clone)]
pub struct Feeds {
    /// Policy versions appended.
    pub policy: watch::Receiver<u64>,
    /// Jobs queued.
    pub queue: watch::Receiver<u64>,
    /// State changes recorded.
    pub jobs: watch::Receiver<u64>,
}

struct Senders {
    policy: watch::Sender<u64>,
    queue: watch::Sender<u64>,
    jobs: watch::Sender<u64>,
}

impl Senders {
    fn closed(&self) -> bool {
        self.policy.is_closed() && self.queue.is_closed() && self.jobs.is_closed()
    }

    fn bump_all(&self) {
        self.policy.send_modify(|n| *n += 1);
        self.queue.send_modify(|n| *n += 1);
        self.jobs.send_modify(|n| *n += 1);
    }
}

/// Starts listening. The task ends when every receiver is gone.
pub fn spawn(cfg: tokio_postgres::Config, tls: MakeRustlsConnect) -> Feeds {
    let (policy, policy_rx) = watch::channel(0u64);
    let (queue, queue_rx) = watch::channel(0u64);
    let (jobs, jobs_rx) = watch::channel(0u64);
    let tx = Senders {
        policy,
        queue,
        jobs,
    };
    tokio::spawn(async move {
        let mut backoff = Duration::from_millis(200);
        let mut connected_before = false;
        while !tx.closed() {
            match listen_once(&cfg, tls.clone(), &tx, &mut connected_before).await {
                Ok(()) => backoff = Duration::from_millis(200),
                Err(e) => tracing::warn!(
                    "change feed (LISTEN {POLICY_CHANNEL}, {QUEUE_CHANNEL}, {JOBS_CHANNEL}): \
                     {e}; polling until it is back"
                ),
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    });
    Feeds {
        policy: policy_rx,
        queue: queue_rx,
        jobs: jobs_rx,
    }
}

/// One connection's life: listen and forward until it fails or nobody listens.
async fn listen_once(
    cfg: &tokio_postgres::Config,
    tls: MakeRustlsConnect,
    tx: &Senders,
    connected_before: &mut bool,
) -> Result<(), tokio_postgres::Error> {
    let (client, mut connection) = cfg.connect(tls).await?;
    let (msgs, mut messages) = futures::channel::mpsc::unbounded();
    let driver = tokio::spawn(async move {
        let mut stream = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(m) = stream.next().await {
            if msgs.unbounded_send(m).is_err() {
                break;
            }
        }
    });
    client
        .batch_execute(&format!(
            "LISTEN {POLICY_CHANNEL}; LISTEN {QUEUE_CHANNEL}; LISTEN {JOBS_CHANNEL};"
        ))
        .await?;
    if *connected_before {
        // Changes made while the feed was down were not notified: look once.
        tx.bump_all();
    }
    *connected_before = true;
    let result = loop {
        tokio::select! {
            m = messages.next() => match m {
                Some(Ok(AsyncMessage::Notification(n))) => {
                    let feed = match n.channel() {
                        QUEUE_CHANNEL => &tx.queue,
                        JOBS_CHANNEL => &tx.jobs,
                        _ => &tx.policy,
                    };
                    feed.send_modify(|c| *c += 1);
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => break Err(e),
                None => break Ok(()),
            },
            () = tx.policy.closed(), if !tx.policy.is_closed() => {}
            () = tx.queue.closed(), if !tx.queue.is_closed() => {}
            () = tx.jobs.closed(), if !tx.jobs.is_closed() => {}
        }
        if tx.closed() {
            break Ok(());
        }
    };
    driver.abort();
    result
}
