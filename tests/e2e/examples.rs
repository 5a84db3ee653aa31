//! The repository's examples work as the README shows them: `madeira validate
//! examples/*.yaml`, the SQL example against its config, and `madeira dev --flows
//! examples/ --jobs examples/jobs/local.yaml` (`.ci/quickstart` runs the whole
//! quick start from a fresh clone); the README's "The estate" commands, line by
//! line, against a `madeira dev` (examples/estate/).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{BIN, Dev};

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

fn validate(args: &[&Path]) -> (Option<i32>, String) {
    let out = Command::new(BIN).arg("validate").args(args).output().expect("madeira validate");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code(), text)
}

#[tokio::test]
async fn the_examples_validate_and_load_into_dev_as_the_readme_shows() {
    let dir = examples();
    let mut flows: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("examples/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    flows.sort();
    let names: Vec<_> = flows.iter().filter_map(|p| p.file_name()?.to_str().map(str::to_string)).collect();
    for want in ["daily-settlement.yaml", "stock-sync.yaml"] {
        assert!(names.iter().any(|n| n == want), "examples/{want} moved: {names:?}");
    }
    let (code, text) = validate(&flows.iter().map(PathBuf::as_path).collect::<Vec<_>>());
    assert_eq!(code, Some(0), "{text}");

    let sql = dir.join("sql/sql-settlement.yaml");
    let config = dir.join("config/finance.yaml");
    let (code, text) = validate(&[Path::new("--config"), &config, &sql]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("flow sql-settlement is valid"), "{text}");

    let data = tempfile::tempdir().expect("tempdir");
    let flows_arg = dir.display().to_string();
    let jobs = dir.join("jobs/local.yaml").display().to_string();
    let dev = Dev::start_with(data.path(), &["--flows", &flows_arg, "--jobs", &jobs]);
    let (status, body) = dev.get("/flows").await;
    assert_eq!(status, 200, "{body}");
    let mut loaded: Vec<&str> =
        body["flows"].as_array().into_iter().flatten().filter_map(|f| f["flow"].as_str()).collect();
    loaded.sort_unstable();
    assert_eq!(loaded.len(), flows.len(), "every examples/*.yaml is a flow dev applies: {body}");
    assert!(loaded.contains(&"daily-settlement") && loaded.contains(&"stock-sync"), "{body}");
}

/// The `sh` block of README.md's "## The estate" section, one command a line.
fn readme_estate_block() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let text = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let section = text.split("\n## The estate\n").nth(1).expect("README.md has a \"## The estate\" section");
    let block =
        section.split("```sh\n").nth(1).and_then(|b| b.split("\n```").next()).expect("its ```sh block");
    block.lines().filter(|l| l.starts_with("madeira ")).map(str::to_string).collect()
}

#[tokio::test]
async fn the_readmes_estate_commands_run_as_written() {
    let lines = readme_estate_block();
    assert!(lines.iter().any(|l| l.starts_with("madeira estate ")), "{lines:?}");
    assert!(lines.iter().any(|l| l.starts_with("madeira backfill ")), "{lines:?}");
    let (_dir, dev) = Dev::start();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let bin_dir = Path::new(BIN).parent().expect("bin dir").display().to_string();
    let path = format!("{bin_dir}:{}", std::env::var("PATH").unwrap_or_default());
    let mut printed = String::new();
    for line in &lines {
        let out = Command::new("sh")
            .args(["-c", line])
            .current_dir(&root)
            .env("PATH", &path)
            .env("MADEIRA_SERVER", &dev.base)
            .output()
            .expect("sh");
        let text =
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "`{line}` failed: {text}");
        printed.push_str(&text);
    }
    assert!(
        printed.contains("warehouse-clean  [held]  waiting for payments-pull 2026-12-04"),
        "the estate shows the held run: {printed}"
    );
    // Every (flow, date) of the backfill ran: 10 workdays, three flows.
    let (_, list) = dev.get("/backfills").await;
    let b = &list["backfills"][0];
    assert_eq!((b["state"].as_str(), b["progress"]["success"].as_u64()), (Some("done"), Some(30)), "{list}");
}

/// Every relative link in README.md and docs/*.md names a file or folder that
/// exists (anchors are not checked; `http(s)://` links are left alone).
#[test]
fn every_relative_link_in_the_readme_and_docs_points_to_a_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut pages = vec![root.join("README.md")];
    let docs = std::fs::read_dir(root.join("docs")).expect("docs/");
    pages.extend(
        docs.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|x| x == "md")),
    );
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in &pages {
        let text = std::fs::read_to_string(page).expect("a page");
        for (line_no, line) in text.lines().enumerate() {
            for target in link_targets(line) {
                if target.contains("://") || target.starts_with('#') || target.starts_with("mailto:") {
                    continue;
                }
                let file = target.split('#').next().unwrap_or_default();
                checked += 1;
                if !page.parent().unwrap_or(&root).join(file).exists() {
                    broken.push(format!("{}:{}: ({target})", page.display(), line_no + 1));
                }
            }
        }
    }
    assert!(checked > 10, "only {checked} relative links found: is the link syntax still `[text](target)`?");
    assert!(broken.is_empty(), "links to missing files (fix the path or the file):\n{}", broken.join("\n"));
}

/// The targets of the `[text](target)` links on one line.
fn link_targets(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        if let Some(end) = rest.find(')') {
            out.push(rest[..end].trim());
            rest = &rest[end + 1..];
        }
    }
    out
}
