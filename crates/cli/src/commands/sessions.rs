//! `recursive sessions`: the sessions kept under the user's data directory, most recent first.

use clap::Args;

/// Arguments of `sessions`.
#[derive(Debug, Args)]
pub struct SessionsArgs {
    /// Print them as one JSON array.
    #[arg(long)]
    pub json: bool,
}

/// Runs the command.
pub fn execute(args: SessionsArgs) -> anyhow::Result<u8> {
    let sessions = crate::sessions::list()?;
    if args.json {
        println!("{}", serde_json::to_string(&sessions)?);
        return Ok(0);
    }
    if sessions.is_empty() {
        eprintln!("no sessions yet (in {})", crate::sessions::root()?.display());
        return Ok(0);
    }
    for s in sessions {
        let updated = s.updated.get(..16).unwrap_or(&s.updated).replace('T', " ");
        println!(
            "{}  {updated}  {:>3} turn(s)  {:>8} tok  ${:.4}  {:<20}  {}",
            s.id,
            s.turns,
            s.input_tokens + s.output_tokens,
            s.cost_usd,
            s.last_outcome,
            s.title
        );
    }
    Ok(0)
}
