//! `forge login URL`, `forge logout`, `forge whoami`.

use std::io::{BufRead, IsTerminal};

use serde_json::Value;

use crate::api::Api;
use crate::config::{self, Login};
use crate::exit::{CliError, code};
use crate::output::{Format, emit, field};
use crate::progress::note;

/// Arguments of `forge login`.
#[derive(Debug, clap::Args)]
pub struct LoginArgs {
    /// The gateway's URL (`https://…`)
    pub url: String,
}

/// The token: `--token`/`FORGE_TOKEN`, else asked for on a terminal, else one line
/// of stdin.
fn read_token(given: Option<String>) -> Result<String, CliError> {
    if let Some(t) = given {
        return Ok(t);
    }
    let token = if std::io::stdin().is_terminal() {
        rpassword::prompt_password("Token: ")
            .map_err(|e| CliError::local("reading the token", e))?
    } else {
        let mut line = String::new();
        std::io::stdin()
            .lock()
            .read_line(&mut line)
            .map_err(|e| CliError::local("reading the token from stdin", e))?;
        line
    };
    let token = token.trim().to_string();
    if token.is_empty() {
        return Err(CliError::Usage(
            "no token given (--token, FORGE_TOKEN or stdin)".into(),
        ));
    }
    Ok(token)
}

/// `forge login`: checks the token with the gateway, then stores both.
pub async fn login(args: LoginArgs, token: Option<String>, format: Format) -> Result<u8, CliError> {
    let login = Login {
        url: args.url.trim_end_matches('/').to_string(),
        token: read_token(token)?,
    };
    let who: Value = Api::new(&login)?.get("/v1/whoami").await?;
    let path = config::store(&login)?;
    emit(format, &who, || {
        note(format!(
            "logged in to {} as team {} ({}); saved in {}",
            login.url,
            field(&who, "/team"),
            field(&who, "/role"),
            path.display()
        ));
    })?;
    Ok(code::OK)
}

/// `forge logout`.
pub fn logout() -> Result<u8, CliError> {
    if config::remove()? {
        note("logged out");
    } else {
        note("not logged in");
    }
    Ok(code::OK)
}

/// `forge whoami`.
pub async fn whoami(api: &Api, format: Format) -> Result<u8, CliError> {
    let who: Value = api.get("/v1/whoami").await?;
    emit(format, &who, || {
        println!(
            "team {} ({}){} at {}",
            field(&who, "/team"),
            field(&who, "/role"),
            who["name"]
                .as_str()
                .map(|n| format!(", token {n}"))
                .unwrap_or_default(),
            api.base()
        );
    })?;
    Ok(code::OK)
}
