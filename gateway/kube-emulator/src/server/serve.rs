//! Serving the router on the bound listener until shutdown: plain HTTP, or HTTPS with
//! the emulator's serving certificate (a token-protected emulator, see `crate::tls`).
//! Open streams (watches, log follows) end on the same shutdown token, so a graceful
//! shutdown does not wait on them.
//!
//! An injected crash (`Faults::crash`) kills the server the way a killed process would:
//! every open connection is closed at once, unanswered, and nothing listens on the port
//! for the rule's down time. Then it listens again on the same address, with the same
//! store, as a restarted kube-apiserver finds etcd as it was.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum_server::Handle;
use axum_server::tls_rustls::RustlsConfig;
use rustls::ServerConfig;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::faults::Faults;

/// How long a restart keeps trying to bind its old address (another process may hold
/// the port for a moment after the old sockets closed).
const REBIND_WITHIN: Duration = Duration::from_secs(5);

/// Serves `app` on `listener` (over TLS with `tls`) until `stop` is cancelled, killed
/// and restarted as `faults` says.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    tls: Option<Arc<ServerConfig>>,
    stop: CancellationToken,
    faults: Arc<Faults>,
) -> std::io::Result<()> {
    let addr = listener.local_addr()?;
    let mut crashes = faults.crash_signal();
    let mut listener = Some(listener);
    loop {
        let bound = match listener.take() {
            Some(l) => l,
            None => rebind(addr).await?,
        };
        let handle = Handle::new();
        let server = serve_once(bound, app.clone(), tls.clone(), handle.clone());
        tokio::pin!(server);
        tokio::select! {
            served = &mut server => return served,
            () = stop.cancelled() => {
                handle.graceful_shutdown(Some(Duration::from_secs(2)));
                return server.await;
            }
            changed = crashes.changed() => {
                if changed.is_err() {
                    return server.await;
                }
                let down = *crashes.borrow_and_update();
                handle.shutdown();
                server.await?;
                tracing::warn!(%addr, ?down, "kubesim killed (injected crash); listening again after its down time");
                tokio::select! {
                    () = stop.cancelled() => return Ok(()),
                    () = tokio::time::sleep(down) => {}
                }
            }
        }
    }
}

/// Serves until `handle` shuts the server down.
async fn serve_once(
    listener: TcpListener,
    app: Router,
    tls: Option<Arc<ServerConfig>>,
    handle: Handle<SocketAddr>,
) -> std::io::Result<()> {
    let listener = listener.into_std()?;
    let service = app.into_make_service();
    match tls {
        Some(tls) => {
            axum_server::from_tcp_rustls(listener, RustlsConfig::from_config(tls))?
                .handle(handle)
                .serve(service)
                .await
        }
        None => {
            axum_server::from_tcp(listener)?
                .handle(handle)
                .serve(service)
                .await
        }
    }
}

/// Binds `addr` again after a crash, retrying for [`REBIND_WITHIN`].
async fn rebind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let deadline = tokio::time::Instant::now() + REBIND_WITHIN;
    loop {
        match TcpListener::bind(addr).await {
            Ok(l) => return Ok(l),
            Err(e) if tokio::time::Instant::now() >= deadline => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}
