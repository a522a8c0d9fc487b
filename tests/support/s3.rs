//! A real S3-compatible server (s3s-fs) for tests: a child process on a free
//! port, serving a temp directory, with random credentials and one bucket.
//!
//! The binary is `$FORGE_S3S_FS` or `<workspace>/target/tools/bin/s3s-fs`,
//! installed by `.ci/run` (or by hand with the command in [`INSTALL_HINT`]).

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How to install the server binary.
pub const INSTALL_HINT: &str =
    "cargo install --locked s3s-fs@0.14.1 --features binary --root <workspace>/target/tools";

/// A running s3s-fs; killed on drop.
pub struct S3Server {
    child: Child,
    /// `http://127.0.0.1:<port>`
    pub endpoint: String,
    pub bucket: String,
    pub access_key: String,
    pub secret_key: String,
    /// Directory the server stores objects in (`<root>/<bucket>/<key>`).
    pub root: tempfile::TempDir,
}

fn random_hex(bytes: usize) -> String {
    use std::io::Read;
    let mut buf = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .expect("read /dev/urandom");
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

/// Path of the s3s-fs binary, or a panic naming the install command.
pub fn s3s_fs_binary() -> PathBuf {
    if let Ok(p) = std::env::var("FORGE_S3S_FS") {
        return PathBuf::from(p);
    }
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/tools/bin/s3s-fs");
    assert!(
        p.is_file(),
        "s3s-fs not found at {} (set FORGE_S3S_FS or install it: {INSTALL_HINT})",
        p.display()
    );
    p
}

impl S3Server {
    /// Start a server with a fresh directory, random keys and bucket `forge`.
    pub fn start() -> Self {
        let bin = s3s_fs_binary();
        let root = tempfile::tempdir().expect("temp dir for s3s-fs");
        let bucket = "forge".to_owned();
        std::fs::create_dir(root.path().join(&bucket)).expect("create bucket dir");
        let access_key = format!("AK{}", random_hex(8)).to_uppercase();
        let secret_key = random_hex(20);
        for _attempt in 0..5 {
            // Port 0 picks a free port; the listener is dropped just before the
            // server binds it (a lost race is retried).
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("bind port 0")
                .port();
            let mut child = Command::new(&bin)
                .args(["--host", "127.0.0.1", "--port", &port.to_string()])
                .args(["--access-key", &access_key, "--secret-key", &secret_key])
                .arg(root.path())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break; // exited: port taken, retry
                }
                if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return Self {
                        child,
                        endpoint: format!("http://127.0.0.1:{port}"),
                        bucket,
                        access_key,
                        secret_key,
                        root,
                    };
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("s3s-fs did not start");
    }

    /// A store config for this server (small multipart threshold optional).
    pub fn config(&self) -> forge_capsule::S3Config {
        forge_capsule::S3Config::new(
            &self.endpoint,
            &self.bucket,
            &self.access_key,
            &self.secret_key,
        )
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
