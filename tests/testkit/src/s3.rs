//! A real S3-compatible server for tests: s3s-fs (strict SigV4: expired, tampered and
//! wrong-secret requests and presigned URLs are refused) served in-process over HTTP
//! on a port-0 listener on 127.0.0.1, with random credentials, a fresh temp directory
//! and one bucket.
//!
//! It runs on a thread of its own with its own Tokio runtime, so it keeps serving
//! whatever the test does meanwhile (blocking calls, a current-thread test runtime,
//! child processes such as the emulator's init containers fetching presigned URLs with
//! `wget`). The listener is bound before [`S3Server::start`] returns, so the server is
//! reachable at once: connections wait in the backlog until the thread accepts them.

use std::thread::JoinHandle;

use axum::Router;
use axum::error_handling::HandleError;
use axum::http::StatusCode;
use s3s::auth::SimpleAuth;
use s3s::service::S3ServiceBuilder;
use tokio::sync::oneshot;

/// A running s3s-fs; stopped (and its directory removed) on drop.
pub struct S3Server {
    /// `http://127.0.0.1:<port>`
    pub endpoint: String,
    pub bucket: String,
    pub access_key: String,
    pub secret_key: String,
    /// Directory the server stores objects in (`<root>/<bucket>/<key>`).
    pub root: tempfile::TempDir,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for S3Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Server")
            .field("endpoint", &self.endpoint)
            .field("bucket", &self.bucket)
            .field("root", &self.root.path())
            .finish_non_exhaustive()
    }
}

fn random_hex(bytes: usize) -> String {
    use std::io::Read;
    let mut buf = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .expect("read /dev/urandom");
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

/// Transport-level failures of the S3 service (S3 errors such as `NoSuchKey` or
/// `SignatureDoesNotMatch` are already proper S3 responses and never get here).
async fn transport_error(err: s3s::HttpError) -> (StatusCode, String) {
    (StatusCode::INTERNAL_SERVER_ERROR, format!("{err:?}"))
}

impl S3Server {
    /// Start a server with a fresh directory, random keys and bucket `forge`.
    pub fn start() -> Self {
        let root = tempfile::tempdir().expect("temp dir for s3s-fs");
        let bucket = "forge".to_owned();
        std::fs::create_dir(root.path().join(&bucket)).expect("create bucket dir");
        let access_key = format!("AK{}", random_hex(8)).to_uppercase();
        let secret_key = random_hex(20);

        let fs = s3s_fs::FileSystem::new(root.path()).expect("s3s-fs over the temp dir");
        let service = {
            let mut b = S3ServiceBuilder::new(fs);
            b.set_auth(SimpleAuth::from_single(
                access_key.clone(),
                secret_key.clone(),
            ));
            b.build()
        };
        let app = Router::new().fallback_service(HandleError::new(service, transport_error));

        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let port = listener.local_addr().expect("listener address").port();
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(format!("s3s-fs-{port}"))
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime for s3s-fs");
                rt.block_on(async move {
                    let listener =
                        tokio::net::TcpListener::from_std(listener).expect("tokio listener");
                    tokio::select! {
                        served = axum::serve(listener, app) => {
                            panic!("s3s-fs server stopped: {served:?}")
                        }
                        _ = stopped => {}
                    }
                });
                // Dropping the runtime ends the open connections.
            })
            .expect("spawn the s3s-fs thread");
        Self {
            endpoint: format!("http://127.0.0.1:{port}"),
            bucket,
            access_key,
            secret_key,
            root,
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
