//! The stand-in's configuration, read like vLLM reads its own: the container's argv
//! (`[vllm] serve <model> [--served-model-name N] [--api-key K] [--port P] ...`,
//! unknown flags ignored) and environment (`VLLM_API_KEY`), plus the emulator-only
//! delays (`--kubesim-chunk-delay-ms`, `--kubesim-load-delay-ms`, or the
//! `KUBESIM_CHUNK_DELAY_MS` / `KUBESIM_LOAD_DELAY_MS` variables; flags win).

use std::time::Duration;

/// vLLM's default port.
pub const DEFAULT_PORT: u16 = 8000;

/// What the stand-in serves and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StandinOptions {
    /// The model argument (`vllm serve <model>`).
    pub model: String,
    /// The id `/v1/models` lists and requests must name (`--served-model-name`,
    /// default the model argument).
    pub served_name: String,
    /// The key requests must carry; `None` serves anyone (vLLM without `--api-key`).
    pub api_key: Option<String>,
    /// The container port it serves (`--port`, default 8000).
    pub port: u16,
    /// Delay before every streamed chunk (and per word of a non-streamed reply).
    pub chunk_delay: Duration,
    /// Delay before the server listens (model loading).
    pub load_delay: Duration,
}

impl StandinOptions {
    /// Reads `argv` (command then args, `$(VAR)` already expanded) and `env`.
    pub fn parse(argv: &[String], env: &[(String, String)]) -> Self {
        let var = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        let mut model: Option<String> = None;
        let mut served: Option<String> = None;
        let mut api_key = var("VLLM_API_KEY").filter(|k| !k.is_empty());
        let mut port = DEFAULT_PORT;
        let ms = |v: Option<String>| {
            v.and_then(|s| s.trim().parse::<u64>().ok())
                .map(Duration::from_millis)
        };
        let mut chunk_delay = ms(var("KUBESIM_CHUNK_DELAY_MS"));
        let mut load_delay = ms(var("KUBESIM_LOAD_DELAY_MS"));
        let mut i = 0;
        let mut after_serve = false;
        while i < argv.len() {
            let a = argv[i].as_str();
            let (flag, inline) = match a.split_once('=') {
                Some((f, v)) if f.starts_with("--") => (f, Some(v.to_owned())),
                _ => (a, None),
            };
            let takes_value = flag.starts_with("--")
                && !matches!(flag, "--trust-remote-code" | "--enforce-eager");
            let value = if takes_value {
                inline.or_else(|| {
                    let v = argv.get(i + 1).filter(|v| !v.starts_with("--")).cloned();
                    if v.is_some() {
                        i += 1;
                    }
                    v
                })
            } else {
                None
            };
            match flag {
                "serve" if !after_serve => after_serve = true,
                "--model" => model = value,
                "--served-model-name" => served = value,
                "--api-key" => api_key = value,
                "--port" => port = value.and_then(|v| v.parse().ok()).unwrap_or(port),
                "--kubesim-chunk-delay-ms" => chunk_delay = ms(value).or(chunk_delay),
                "--kubesim-load-delay-ms" => load_delay = ms(value).or(load_delay),
                positional if !positional.starts_with('-') && after_serve && model.is_none() => {
                    model = Some(positional.to_owned());
                }
                _ => {}
            }
            i += 1;
        }
        let model = model.unwrap_or_else(|| "standin-model".to_owned());
        Self {
            served_name: served.unwrap_or_else(|| model.clone()),
            model,
            api_key,
            port,
            chunk_delay: chunk_delay.unwrap_or_default(),
            load_delay: load_delay.unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn reads_vllm_argv_and_the_emulator_knobs() {
        let o = StandinOptions::parse(
            &argv(
                "vllm serve /models/ckpt --tensor-parallel-size 2 --served-model-name team-a/m \
                 --api-key k1 --port=8080 --trust-remote-code --kubesim-chunk-delay-ms 250",
            ),
            &[("KUBESIM_LOAD_DELAY_MS".into(), "1500".into())],
        );
        assert_eq!(o.model, "/models/ckpt");
        assert_eq!(o.served_name, "team-a/m");
        assert_eq!(o.api_key.as_deref(), Some("k1"));
        assert_eq!(o.port, 8080);
        assert_eq!(o.chunk_delay, Duration::from_millis(250));
        assert_eq!(o.load_delay, Duration::from_millis(1500));
    }

    #[test]
    fn defaults_and_env_key() {
        let o = StandinOptions::parse(
            &argv("serve meta/llama"),
            &[
                ("VLLM_API_KEY".into(), "from-env".into()),
                ("KUBESIM_CHUNK_DELAY_MS".into(), "10".into()),
            ],
        );
        assert_eq!(o.model, "meta/llama");
        assert_eq!(o.served_name, "meta/llama");
        assert_eq!(o.api_key.as_deref(), Some("from-env"));
        assert_eq!(o.port, DEFAULT_PORT);
        assert_eq!(o.chunk_delay, Duration::from_millis(10));
        assert_eq!(o.load_delay, Duration::ZERO);
        let o = StandinOptions::parse(&argv("vllm serve m --api-key flag"), &[]);
        assert_eq!(o.api_key.as_deref(), Some("flag"));
    }
}
