//! Serving the router on the bound listener until shutdown: plain HTTP, or HTTPS with
//! the emulator's serving certificate (a token-protected emulator, see `crate::tls`).
//! Open streams (watches, log follows) end on the same shutdown token, so a graceful
//! shutdown does not wait on them.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum_server::tls_rustls::RustlsConfig;
use rustls::ServerConfig;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Serves `app` on `listener` (over TLS with `tls`) until `stop` is cancelled.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    tls: Option<Arc<ServerConfig>>,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let Some(tls) = tls else {
        return axum::serve(listener, app)
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await;
    };
    let handle = axum_server::Handle::new();
    let on_stop = handle.clone();
    tokio::spawn(async move {
        stop.cancelled().await;
        on_stop.graceful_shutdown(Some(Duration::from_secs(2)));
    });
    axum_server::from_tcp_rustls(listener.into_std()?, RustlsConfig::from_config(tls))?
        .handle(handle)
        .serve(app.into_make_service())
        .await
}
