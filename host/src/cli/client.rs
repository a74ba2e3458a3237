//! `agenthost client …`: the [`crate::client`] library on the command line.
//! Answers go to stdout (text for an agent, JSON for instances), so scripts
//! can pipe them; what a person needs besides goes to stderr.

use anyhow::Context;
use serde_json::Value;

use super::{AgentCommand, ClientArgs, ClientCommand, OrchestrationCommand};
use crate::client::{Client, RunsQuery};

pub(super) async fn run(args: ClientArgs) -> anyhow::Result<()> {
    let mut client = Client::new(&args.endpoint())?;
    if let Some(key) = &args.api_key {
        client = client.with_key(key.expose());
    }
    match args.command {
        ClientCommand::Agent(AgentCommand::Run {
            name,
            message,
            session,
        }) => {
            let answer = client
                .run_agent(&name, &message, session.as_deref())
                .await?;
            eprintln!("session: {}", answer.session_id);
            println!("{}", answer.text);
        }
        ClientCommand::Agent(AgentCommand::Cancel { name, id }) => {
            let run = client.cancel_run(&name, &id).await?;
            println!("{}", serde_json::to_string_pretty(&run)?);
        }
        ClientCommand::Agent(AgentCommand::Runs {
            name,
            session,
            status,
            limit,
            after,
        }) => {
            let query = RunsQuery {
                session_id: session.as_deref(),
                status: status.as_deref(),
                limit,
                after: after.as_deref(),
            };
            let page = client.runs(&name, &query).await?;
            println!("{}", serde_json::to_string_pretty(&page)?);
        }
        ClientCommand::Orchestration(command) => orchestration(&client, command).await?,
    }
    Ok(())
}

async fn orchestration(client: &Client, command: OrchestrationCommand) -> anyhow::Result<()> {
    match command {
        OrchestrationCommand::Start { name, input, id } => {
            let input = json_arg("--input", input.as_deref())?;
            println!("{}", client.start(&name, input, id.as_deref()).await?);
        }
        OrchestrationCommand::Status { id } => {
            let status = client
                .status(&id)
                .await?
                .with_context(|| format!("instance '{id}' does not exist"))?;
            println!("{}", serde_json::to_string_pretty(&status)?);
        }
        OrchestrationCommand::Raise { id, event, data } => {
            let data = json_arg("--data", data.as_deref())?;
            client.raise(&id, &event, data).await?;
            eprintln!("raised '{event}' at {id}");
        }
        OrchestrationCommand::Terminate { id, reason } => {
            client.terminate(&id, &reason).await?;
            eprintln!("terminating {id}");
        }
        OrchestrationCommand::Wait { id, timeout } => {
            let status = client.wait(&id, timeout).await?;
            println!("{}", serde_json::to_string_pretty(&status)?);
        }
        OrchestrationCommand::List => {
            println!("{}", serde_json::to_string_pretty(&client.list().await?)?);
        }
    }
    Ok(())
}

fn json_arg(flag: &str, text: Option<&str>) -> anyhow::Result<Option<Value>> {
    text.map(|t| serde_json::from_str(t).with_context(|| format!("{flag} is not JSON: {t}")))
        .transpose()
}
