//! A real headless Chromium for browser tests, driven through WebDriver: starts
//! Debian's `chromedriver` on a free loopback port and opens a session with a fresh
//! profile and every background network feature off (the test machine's network is
//! closed). Both programs are required: a machine without them fails the test with
//! how to install them (`tests/run.sh` does), it never skips silently.
//!
//! Set `FORGE_CHROMIUM` / `FORGE_CHROMEDRIVER` to use other binaries.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use fantoccini::wd::Capabilities;
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::json;

use crate::wait::{eventually, not_yet};

/// A WebDriver session on headless Chromium. On drop, chromedriver and every
/// Chromium process it started are killed (they share a process group of their own:
/// killing only the driver left the browsers running, ~200 MB each, for the rest of
/// the test run).
pub struct Browser {
    pub client: Client,
    driver: tokio::process::Child,
    _profile: tempfile::TempDir,
    shots: PathBuf,
}

impl Drop for Browser {
    fn drop(&mut self) {
        // The driver leads its process group; Chromium and its helpers are in it.
        if let Some(pid) = self.driver.id() {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", "--", &format!("-{pid}")])
                .stderr(Stdio::null())
                .status();
        }
    }
}

fn program(env: &str, names: &[&str]) -> PathBuf {
    if let Ok(p) = std::env::var(env) {
        return PathBuf::from(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        for name in names {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    panic!(
        "browser tests need {} on PATH (Debian: apt-get install chromium chromium-driver; \
         tests/run.sh installs them) or {env} set",
        names.join(" or ")
    );
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session; screenshots go to
    /// `<workspace>/target/e2e-artifacts/<name>/`.
    pub async fn start(name: &str) -> Browser {
        let chromium = program("FORGE_CHROMIUM", &["chromium", "chromium-browser"]);
        let driver_bin = program("FORGE_CHROMEDRIVER", &["chromedriver"]);
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let driver = tokio::process::Command::new(&driver_bin)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", driver_bin.display()));
        let webdriver = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        eventually("chromedriver ready", Duration::from_secs(30), || async {
            match http.get(format!("{webdriver}/status")).send().await {
                Ok(r) => match r.json::<serde_json::Value>().await {
                    Ok(v) if v["value"]["ready"] == true => Ok(()),
                    other => Err(not_yet(format!("{other:?}"))),
                },
                Err(e) => Err(not_yet(e.to_string())),
            }
        })
        .await;
        let profile = tempfile::tempdir().expect("profile dir");
        let mut caps = Capabilities::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": chromium,
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                    "--no-first-run", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync",
                    "--disable-dev-shm-usage", "--window-size=1200,900",
                    format!("--user-data-dir={}", profile.path().display()),
                ],
            }),
        );
        let client = ClientBuilder::new(HttpConnector::new())
            .capabilities(caps)
            .connect(&webdriver)
            .await
            .expect("a Chromium WebDriver session");
        let shots = crate::plugins::workspace_root()
            .join("target/e2e-artifacts")
            .join(name);
        std::fs::create_dir_all(&shots).expect("artifact dir");
        Browser {
            client,
            driver,
            _profile: profile,
            shots,
        }
    }

    /// Saves a screenshot of the page as `<name>.png`.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let png = self.client.screenshot().await.expect("screenshot");
        let path = self.shots.join(format!("{name}.png"));
        std::fs::write(&path, png).expect("write screenshot");
        path
    }

    /// Saves the page as `<name>.png` in its light theme and `<name>-dark.png` in its
    /// dark one (the console follows `data-theme` on the root as it follows the
    /// browser's preference).
    pub async fn screenshots(&self, name: &str) {
        self.screenshot(name).await;
        self.theme("dark").await;
        self.screenshot(&format!("{name}-dark")).await;
        self.theme("light").await;
    }

    /// Forces the page's colour theme (`light` or `dark`).
    async fn theme(&self, theme: &str) {
        self.client
            .execute(
                "document.documentElement.setAttribute('data-theme', arguments[0]); return null;",
                vec![serde_json::json!(theme)],
            )
            .await
            .expect("set the theme");
    }

    /// The attribute `name` of the first element matching `css`, if both exist.
    pub async fn attr(&self, css: &str, name: &str) -> Option<String> {
        match self.client.find(Locator::Css(css)).await {
            Ok(e) => e.attr(name).await.ok().flatten(),
            Err(_) => None,
        }
    }

    /// Opens `url`.
    pub async fn goto(&self, url: &str) {
        self.client.goto(url).await.expect("navigate");
    }

    /// The text of the first element matching `css` (`None` if there is none, or it
    /// went away while read — the page was navigating).
    pub async fn text(&self, css: &str) -> Option<String> {
        match self.client.find(Locator::Css(css)).await {
            Ok(e) => e.text().await.ok(),
            Err(_) => None,
        }
    }

    /// Waits until the element matching `css` has a text containing `needle`.
    pub async fn wait_text(&self, css: &str, needle: &str, within: Duration) -> String {
        eventually(&format!("`{css}` to say `{needle}`"), within, || async {
            match self.text(css).await {
                Some(t) if t.contains(needle) => Ok(t),
                other => Err(not_yet(other)),
            }
        })
        .await
    }

    /// Clicks the element matching `css`.
    pub async fn click(&self, css: &str) {
        self.client
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no `{css}`: {e}"))
            .click()
            .await
            .unwrap_or_else(|e| panic!("clicking `{css}`: {e}"));
    }

    /// Replaces the value of the input matching `css` by typing `text`.
    pub async fn fill(&self, css: &str, text: &str) {
        let e = self
            .client
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no `{css}`: {e}"));
        e.clear().await.expect("clear");
        e.send_keys(text).await.expect("type");
    }

    /// The current URL's path.
    pub async fn path(&self) -> String {
        self.client
            .current_url()
            .await
            .expect("current URL")
            .path()
            .to_string()
    }

    /// The page's HTML.
    pub async fn source(&self) -> String {
        self.client.source().await.expect("page source")
    }

    /// Where screenshots are written.
    pub fn artifacts(&self) -> &Path {
        &self.shots
    }
}
