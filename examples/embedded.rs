//! An axum application that embeds agenthost: its own route (`GET /hello`)
//! beside the agents and orchestrations of a components directory.
//!
//! ```text
//! cargo run -p agenthost --example embedded -- --components target/components --port 8080
//! curl localhost:8080/hello
//! curl -d 'Write about tea.' localhost:8080/api/agents/writer/run
//! ```
//!
//! Every `agenthost serve` setting applies through its `AGENTHOST_*`
//! environment variable; `--store` and `--taskhub` are read here too.

use std::time::Duration;

use axum::routing::get;
use clap::Parser;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value = "components")]
    components: std::path::PathBuf,
    #[arg(long, default_value = "sqlite://embedded.db")]
    store: String,
    #[arg(long)]
    taskhub: Option<String>,
    #[arg(long, default_value_t = 8080)]
    port: u16,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let mut builder = agenthost::embed::Builder::new()?
        .components(args.components)
        .store(&args.store);
    if let Some(hub) = &args.taskhub {
        builder = builder.taskhub(hub);
    }
    let host = builder.start().await?;

    let app = axum::Router::new()
        .route("/hello", get(|| async { "hello from the embedding app" }))
        .merge(host.router());
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", args.port)).await?;
    println!("example listening on http://{}", listener.local_addr()?);
    // TCP_NODELAY: streamed answers are many small writes.
    let listener = axum::serve::ListenerExt::tap_io(listener, |connection| {
        let _ = connection.set_nodelay(true);
    });
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    host.shutdown(Duration::from_secs(10)).await;
    Ok(())
}
