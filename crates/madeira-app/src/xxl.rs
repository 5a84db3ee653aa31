//! `xxl_job:` of the server config (SPEC §14): the admin-endpoint prefix and one
//! access token per executor app, each read from an env variable or a file —
//! never from the config text, and never a default.

use std::path::PathBuf;

use serde::Deserialize;

use crate::error::ConfigError;

/// `xxl_job: {prefix, apps: [{app, token_env | token_file}]}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct XxlJobSection {
    /// Path prefix of the admin endpoints (default `/xxl-job-admin`).
    pub prefix: Option<String>,
    #[serde(default)]
    pub apps: Vec<XxlAppSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct XxlAppSpec {
    pub app: String,
    pub token_env: Option<String>,
    pub token_file: Option<PathBuf>,
}

/// The admin side's options, tokens read; `None` without an `xxl_job:` section.
pub fn options(
    section: Option<&XxlJobSection>,
    file: &str,
) -> Result<Option<madeira_xxl::XxlOptions>, ConfigError> {
    let Some(section) = section else { return Ok(None) };
    let err = |message: String| ConfigError { file: file.to_string(), message };
    let mut apps = Vec::new();
    for spec in &section.apps {
        let token = match (&spec.token_env, &spec.token_file) {
            (Some(var), None) => std::env::var(var)
                .map_err(|_| err(format!("xxl_job.apps `{}`: env variable {var} is not set", spec.app)))?,
            (None, Some(path)) => crate::files::read_text(path, crate::files::Confine::Anywhere)
                .map_err(|e| err(format!("xxl_job.apps `{}`: {e}", spec.app)))?,
            _ => {
                return Err(err(format!(
                    "xxl_job.apps `{}`: give exactly one of token_env or token_file (XXL-JOB's \
                     xxl.job.accessToken of that executor app)",
                    spec.app
                )));
            }
        };
        apps.push(madeira_xxl::AppToken {
            app: spec.app.trim().to_string(),
            token: token.trim().to_string(),
        });
    }
    let options = madeira_xxl::XxlOptions::new(section.prefix.clone(), apps);
    // Checked here too (before any port is bound), with the config file named.
    options.validate().map_err(|e| err(e.to_string()))?;
    Ok(Some(options))
}
