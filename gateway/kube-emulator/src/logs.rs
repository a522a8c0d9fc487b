//! Pod log storage: the simulated kubelet appends container output here and the API
//! server's `pods/{name}/log` endpoint serves it (plain reads, `tailLines`, `follow`).
//!
//! Logs are keyed by `(namespace, pod, container)`, one per container *instance* as the
//! kubelet keeps them: [`LogStore::restart`] (a container started again) keeps the
//! instance that ended as the previous one and starts an empty log, so `previous=true`
//! ([`LogStore::read_previous`]) reads the last terminated instance. A stream is
//! "open" until [`LogStore::close`] is called (the container exited); follow readers
//! end then, or when the pod's logs are removed with [`LogStore::remove_pod`].

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::Stream;
use tokio::sync::watch;

/// Errors callers of the log store branch on.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// No container of that pod has written a log yet.
    #[error("no logs for container {container:?} of pod {namespace}/{pod}")]
    NotFound {
        /// Pod namespace.
        namespace: String,
        /// Pod name.
        pod: String,
        /// Container name.
        container: String,
    },
    /// The container has no terminated instance (it never restarted, or never ended).
    #[error("previous terminated container \"{container}\" in pod \"{pod}\" not found")]
    NoPrevious {
        /// Pod name.
        pod: String,
        /// Container name.
        container: String,
    },
}

type Key = (String, String, String);

#[derive(Debug)]
struct Entry {
    data: Vec<u8>,
    closed: bool,
    /// Bumped on every append/close/removal so followers wake up.
    notify: watch::Sender<u64>,
    removed: bool,
}

impl Entry {
    fn new() -> Self {
        Self {
            data: Vec::new(),
            closed: false,
            notify: watch::channel(0).0,
            removed: false,
        }
    }
    fn bump(&self) {
        self.notify.send_modify(|v| *v += 1);
    }
}

/// In-memory container logs shared by the kubelet (writer) and the API server (reader).
#[derive(Debug, Default)]
pub struct LogStore {
    inner: Mutex<BTreeMap<Key, Arc<Mutex<Entry>>>>,
    /// The instance before the current one, per container that restarted.
    previous: Mutex<BTreeMap<Key, Arc<Mutex<Entry>>>>,
}

fn key(namespace: &str, pod: &str, container: &str) -> Key {
    (namespace.to_owned(), pod.to_owned(), container.to_owned())
}

/// Returns the suffix of `data` holding its last `n` lines (a trailing newline does not
/// start a new line), like the kubelet's `tailLines`.
pub fn tail_lines(data: &[u8], n: usize) -> &[u8] {
    if n == 0 {
        return &data[data.len()..];
    }
    let body = data.strip_suffix(b"\n").unwrap_or(data);
    let mut seen = 0;
    for (i, b) in body.iter().enumerate().rev() {
        if *b == b'\n' {
            seen += 1;
            if seen == n {
                return &data[i + 1..];
            }
        }
    }
    data
}

impl LogStore {
    /// Creates an empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn entry(&self, namespace: &str, pod: &str, container: &str) -> Arc<Mutex<Entry>> {
        let mut map = self.inner.lock().expect("log store lock poisoned");
        map.entry(key(namespace, pod, container))
            .or_insert_with(|| Arc::new(Mutex::new(Entry::new())))
            .clone()
    }

    fn existing(&self, namespace: &str, pod: &str, container: &str) -> Option<Arc<Mutex<Entry>>> {
        let map = self.inner.lock().expect("log store lock poisoned");
        map.get(&key(namespace, pod, container)).cloned()
    }

    /// Appends output of a container (creating its log if needed). Appending to a
    /// closed log re-opens it (a restarted container keeps writing to the same log).
    pub fn append(&self, namespace: &str, pod: &str, container: &str, bytes: &[u8]) {
        let entry = self.entry(namespace, pod, container);
        let mut e = entry.lock().expect("log entry lock poisoned");
        e.data.extend_from_slice(bytes);
        e.closed = false;
        e.bump();
    }

    /// Marks a container's log finished: `follow` readers drain and end.
    pub fn close(&self, namespace: &str, pod: &str, container: &str) {
        let entry = self.entry(namespace, pod, container);
        let mut e = entry.lock().expect("log entry lock poisoned");
        e.closed = true;
        e.bump();
    }

    /// A container starts again: its log so far becomes the previous instance's (its
    /// followers end, as a stream of an exited container does) and the new instance
    /// writes to an empty log.
    pub fn restart(&self, namespace: &str, pod: &str, container: &str) {
        let k = key(namespace, pod, container);
        let old = {
            let mut map = self.inner.lock().expect("log store lock poisoned");
            map.insert(k.clone(), Arc::new(Mutex::new(Entry::new())))
        };
        if let Some(old) = old {
            {
                let mut e = old.lock().expect("log entry lock poisoned");
                e.closed = true;
                e.bump();
            }
            self.previous
                .lock()
                .expect("log store lock poisoned")
                .insert(k, old);
        }
    }

    /// The log of the container's last terminated instance (`previous=true`): the
    /// current log when the current instance has exited (it is waiting to restart),
    /// else the instance before it. `last_terminated` is whether the pod status
    /// reports one (`lastState.terminated`), as the kubelet requires.
    pub fn read_previous(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
        last_terminated: bool,
        tail: Option<usize>,
    ) -> Result<Vec<u8>, LogError> {
        let not_found = || LogError::NoPrevious {
            pod: pod.to_owned(),
            container: container.to_owned(),
        };
        if !last_terminated {
            return Err(not_found());
        }
        let current = self.existing(namespace, pod, container);
        let ended = current
            .as_ref()
            .is_some_and(|e| e.lock().expect("log entry lock poisoned").closed);
        let entry = if ended {
            current
        } else {
            let map = self.previous.lock().expect("log store lock poisoned");
            map.get(&key(namespace, pod, container)).cloned()
        }
        .ok_or_else(not_found)?;
        let e = entry.lock().expect("log entry lock poisoned");
        Ok(match tail {
            Some(n) => tail_lines(&e.data, n).to_vec(),
            None => e.data.clone(),
        })
    }

    /// Drops all logs of a pod (pod deleted); open followers end.
    pub fn remove_pod(&self, namespace: &str, pod: &str) {
        self.previous
            .lock()
            .expect("log store lock poisoned")
            .retain(|(ns, p, _), _| !(ns == namespace && p == pod));
        let removed: Vec<Arc<Mutex<Entry>>> = {
            let mut map = self.inner.lock().expect("log store lock poisoned");
            let keys: Vec<Key> = map
                .keys()
                .filter(|(ns, p, _)| ns == namespace && p == pod)
                .cloned()
                .collect();
            keys.iter().filter_map(|k| map.remove(k)).collect()
        };
        for entry in removed {
            let mut e = entry.lock().expect("log entry lock poisoned");
            e.removed = true;
            e.bump();
        }
    }

    /// Container names of a pod that have a log, sorted.
    pub fn containers(&self, namespace: &str, pod: &str) -> Vec<String> {
        let map = self.inner.lock().expect("log store lock poisoned");
        map.keys()
            .filter(|(ns, p, _)| ns == namespace && p == pod)
            .map(|(_, _, c)| c.clone())
            .collect()
    }

    /// Whether the container's log is closed (`None` if it has no log).
    pub fn is_closed(&self, namespace: &str, pod: &str, container: &str) -> Option<bool> {
        let entry = self.existing(namespace, pod, container)?;
        let e = entry.lock().expect("log entry lock poisoned");
        Some(e.closed)
    }

    /// The whole log, or its last `tail` lines.
    pub fn read(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
        tail: Option<usize>,
    ) -> Result<Vec<u8>, LogError> {
        let entry = self
            .existing(namespace, pod, container)
            .ok_or_else(|| LogError::NotFound {
                namespace: namespace.to_owned(),
                pod: pod.to_owned(),
                container: container.to_owned(),
            })?;
        let e = entry.lock().expect("log entry lock poisoned");
        Ok(match tail {
            Some(n) => tail_lines(&e.data, n).to_vec(),
            None => e.data.clone(),
        })
    }

    /// Streams the log (from its last `tail` lines if given) and then new output as it
    /// is appended, until the log is closed or the pod's logs are removed. Following a
    /// container that has not written yet waits for its first output.
    pub fn follow(
        self: &Arc<Self>,
        namespace: &str,
        pod: &str,
        container: &str,
        tail: Option<usize>,
    ) -> impl Stream<Item = Bytes> + Send + 'static {
        let entry = self.entry(namespace, pod, container);
        let rx = entry
            .lock()
            .expect("log entry lock poisoned")
            .notify
            .subscribe();
        let start = {
            let e = entry.lock().expect("log entry lock poisoned");
            match tail {
                Some(n) => e.data.len() - tail_lines(&e.data, n).len(),
                None => 0,
            }
        };
        futures::stream::unfold((entry, start, false), move |(entry, mut offset, done)| {
            let mut rx = rx.clone();
            async move {
                if done {
                    return None;
                }
                loop {
                    rx.mark_unchanged();
                    let (chunk, finished) = {
                        let e = entry.lock().expect("log entry lock poisoned");
                        let chunk = (e.data.len() > offset)
                            .then(|| Bytes::copy_from_slice(&e.data[offset..]));
                        (chunk, e.closed || e.removed)
                    };
                    if let Some(chunk) = chunk {
                        offset += chunk.len();
                        return Some((chunk, (entry, offset, false)));
                    }
                    if finished {
                        return None;
                    }
                    if rx.changed().await.is_err() {
                        return None;
                    }
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    #[test]
    fn tail_counts_lines_from_the_end() {
        assert_eq!(tail_lines(b"a\nb\nc\n", 2), b"b\nc\n");
        assert_eq!(tail_lines(b"a\nb\nc", 2), b"b\nc");
        assert_eq!(tail_lines(b"a\nb\n", 5), b"a\nb\n");
        assert_eq!(tail_lines(b"a\nb\n", 0), b"");
    }

    #[tokio::test]
    async fn follow_ends_on_close() {
        let store = Arc::new(LogStore::new());
        store.append("ns", "p", "c", b"one\n");
        let mut s = Box::pin(store.follow("ns", "p", "c", None));
        assert_eq!(
            s.next().await.expect("first chunk"),
            Bytes::from_static(b"one\n")
        );
        let writer = store.clone();
        tokio::spawn(async move {
            writer.append("ns", "p", "c", b"two\n");
            writer.close("ns", "p", "c");
        });
        let mut rest = Vec::new();
        while let Some(b) = s.next().await {
            rest.extend_from_slice(&b);
        }
        assert_eq!(rest, b"two\n");
        assert!(store.read("ns", "p", "x", None).is_err());
    }

    #[tokio::test]
    async fn previous_reads_the_last_terminated_instance() {
        let store = Arc::new(LogStore::new());
        store.append("ns", "p", "c", b"first run\n");
        // Running, never terminated: nothing previous.
        let err = store
            .read_previous("ns", "p", "c", false, None)
            .expect_err("no previous");
        assert_eq!(
            err.to_string(),
            "previous terminated container \"c\" in pod \"p\" not found"
        );
        store.close("ns", "p", "c");
        // Exited, waiting to restart: the current log is the last terminated one.
        assert_eq!(
            store
                .read_previous("ns", "p", "c", true, None)
                .expect("prev"),
            b"first run\n"
        );
        let mut follower = Box::pin(store.follow("ns", "p", "c", None));
        store.restart("ns", "p", "c");
        store.append("ns", "p", "c", b"second run\n");
        assert_eq!(
            store.read("ns", "p", "c", None).expect("current"),
            b"second run\n"
        );
        assert_eq!(
            store
                .read_previous("ns", "p", "c", true, Some(1))
                .expect("prev"),
            b"first run\n"
        );
        let mut seen = Vec::new();
        while let Some(b) = follower.next().await {
            seen.extend_from_slice(&b);
        }
        assert_eq!(seen, b"first run\n", "a follower ends with its instance");
        store.remove_pod("ns", "p");
        assert!(store.read_previous("ns", "p", "c", true, None).is_err());
    }
}
