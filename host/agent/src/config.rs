//! Command-line configuration of the agent.

use std::io::BufRead;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::Parser;

#[derive(Parser, Debug)]
#[command(name = "orchard-agent", version, about = "Orchard's in-sandbox agent")]
pub struct Args {
    /// Where to serve: `tcp:ADDR:PORT`, `unix:PATH`, or `fd:N` (an inherited listening socket,
    /// TCP or unix). Repeat to serve on several.
    #[arg(long = "listen", required_unless_present = "install")]
    listen: Vec<String>,
    /// Copy this binary to PATH (executable) and exit: how an init container puts the agent
    /// into a volume the sandbox's own image then runs it from.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["listen", "entrypoint"])]
    pub install: Option<PathBuf>,
    /// Read the token from the first line of stdin (the local backend's way: the token never
    /// touches the sandbox's filesystem or environment).
    #[arg(long)]
    token_stdin: bool,
    /// Read the token from this file.
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Only the SHA-256 of the token, hex: the agent accepts whatever hashes to it and never
    /// holds the token itself (how pods get theirs: the hash is no secret, so no Secret object).
    #[arg(long, value_name = "HEX")]
    token_sha256: Option<String>,
    /// The token itself. Prefer the other two: an environment variable is inherited by nothing
    /// (we remove it at start) but stays in the process's initial environment block.
    #[arg(long, env = "ORCHARD_AGENT_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Directories the file API may touch; repeatable (default `/`). /proc, /sys and /.orchard
    /// are refused whatever the roots.
    #[arg(long = "root")]
    roots: Vec<PathBuf>,
    /// Where spilled output, session scratch files and process logs go.
    #[arg(long, default_value = "/tmp/.orchard")]
    scratch_dir: PathBuf,
    /// End the sandbox at this Unix time (seconds): its hard lifetime (see `lifetime`).
    #[arg(long, value_name = "UNIX_SECONDS")]
    pub die_at: Option<u64>,
    /// The same for a sandbox waiting in a warm pool: replaced by the deadline its claim sets.
    #[arg(long, value_name = "UNIX_SECONDS", conflicts_with = "die_at")]
    pub pool_die_at: Option<u64>,
    /// The image's entrypoint and command, started as background process `entrypoint`.
    #[arg(last = true)]
    entrypoint: Vec<String>,
}

/// Copies the running binary to `to` (parents created, mode 0755), through a temporary file
/// renamed into place so that a reader never sees half a binary.
/// The assistant domain's mock services, when they sit beside the agent (the agent image
/// carries both), are installed beside it too.
pub fn install(to: &Path) -> anyhow::Result<()> {
    let me = std::env::current_exe().context("finding the agent's own binary")?;
    if let Some(dir) = to.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    copy_executable(&me, to)?;
    let mocks = me.with_file_name("orchard-mock-services");
    if mocks.is_file() {
        copy_executable(&mocks, &to.with_file_name("orchard-mock-services"))?;
    }
    Ok(())
}

fn copy_executable(from: &Path, to: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let tmp = to.with_extension("orchard-partial");
    std::fs::copy(from, &tmp).with_context(|| format!("copying {} to {}", from.display(), tmp.display()))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))?;
    std::fs::rename(&tmp, to).with_context(|| format!("installing {}", to.display()))?;
    Ok(())
}

#[derive(Debug, Clone)]
pub enum Listen {
    Tcp(SocketAddr),
    Unix(PathBuf),
    Fd(i32),
}

/// What a request's bearer token is checked against.
#[derive(Debug)]
pub enum Credential {
    /// The token itself.
    Token(String),
    /// Its SHA-256: the token is whatever hashes to it.
    Sha256([u8; 32]),
}

impl Credential {
    /// Whether `presented` is the token, compared in constant time.
    pub fn accepts(&self, presented: &str) -> bool {
        match self {
            Credential::Token(token) => constant_time_eq(presented.as_bytes(), token.as_bytes()),
            Credential::Sha256(hash) => {
                use sha2::Digest;
                constant_time_eq(&sha2::Sha256::digest(presented.as_bytes()), hash)
            }
        }
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[derive(Debug)]
pub struct Config {
    pub listen: Vec<Listen>,
    pub token: Credential,
    pub roots: Vec<PathBuf>,
    pub scratch_dir: PathBuf,
    /// The shell that runs string commands: bash when the image has it, sh otherwise.
    pub shell: PathBuf,
    pub entrypoint: Vec<String>,
}

impl Config {
    pub fn from_args(args: Args) -> anyhow::Result<Self> {
        let listen = args.listen.iter().map(|l| parse_listen(l)).collect::<anyhow::Result<Vec<_>>>()?;
        let token = match &args.token_sha256 {
            Some(hex) => {
                let bytes = hex::decode(hex.trim()).ok().and_then(|b| <[u8; 32]>::try_from(b).ok());
                Credential::Sha256(bytes.context("--token-sha256: not 64 hex digits")?)
            }
            None => {
                let token = read_token(&args)?;
                if token.len() < 16 {
                    bail!("the token must be at least 16 characters long");
                }
                Credential::Token(token)
            }
        };
        // Nothing we start may inherit the token.
        // SAFETY: called before the runtime starts, while the process has a single thread.
        unsafe { std::env::remove_var("ORCHARD_AGENT_TOKEN") };
        let mut roots = args.roots;
        if roots.is_empty() {
            roots.push(PathBuf::from("/"));
        }
        for root in &roots {
            if !root.is_absolute() {
                bail!("--root {} is not an absolute path", root.display());
            }
        }
        Ok(Config {
            listen,
            token,
            roots,
            scratch_dir: args.scratch_dir,
            shell: detect_shell(),
            entrypoint: args.entrypoint,
        })
    }
}

fn parse_listen(spec: &str) -> anyhow::Result<Listen> {
    if let Some(addr) = spec.strip_prefix("tcp:") {
        return Ok(Listen::Tcp(addr.parse().with_context(|| format!("--listen {spec}: bad address"))?));
    }
    if let Some(path) = spec.strip_prefix("unix:") {
        return Ok(Listen::Unix(PathBuf::from(path)));
    }
    if let Some(fd) = spec.strip_prefix("fd:") {
        return Ok(Listen::Fd(fd.parse().with_context(|| format!("--listen {spec}: bad fd"))?));
    }
    bail!("--listen {spec}: expected tcp:ADDR:PORT, unix:PATH or fd:N")
}

fn read_token(args: &Args) -> anyhow::Result<String> {
    let token = if args.token_stdin {
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line).context("reading the token from stdin")?;
        line
    } else if let Some(path) = &args.token_file {
        std::fs::read_to_string(path).with_context(|| format!("reading the token from {}", path.display()))?
    } else if let Some(token) = &args.token {
        token.clone()
    } else {
        bail!("no token: pass --token-stdin, --token-file or ORCHARD_AGENT_TOKEN");
    };
    Ok(token.trim().to_string())
}

fn detect_shell() -> PathBuf {
    ["/bin/bash", "/usr/bin/bash", "/usr/local/bin/bash"]
        .iter()
        .map(Path::new)
        .find(|p| p.exists())
        .unwrap_or(Path::new("/bin/sh"))
        .to_path_buf()
}

#[cfg(test)]
mod credential_tests {
    use super::Credential;

    #[test]
    fn a_hash_credential_accepts_exactly_its_preimage() {
        use sha2::Digest;
        let token = "a-sandbox-token-of-some-length";
        let hash: [u8; 32] = sha2::Sha256::digest(token.as_bytes()).into();
        let credential = Credential::Sha256(hash);
        assert!(credential.accepts(token));
        assert!(!credential.accepts("a-sandbox-token-of-some-lengtH"));
        assert!(!credential.accepts(&hex::encode(hash)), "the hash itself is no credential");
        assert!(!credential.accepts(""));
        assert!(Credential::Token(token.into()).accepts(token));
    }
}
