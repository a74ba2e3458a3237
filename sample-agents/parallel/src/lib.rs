//! `parallel`: the physicist and the chemist answer one question at once;
//! the answers are awaited together and returned in order.
//! Also started by `POST /api/orchestration/run`.

use agenthost_guest::{Component, Context, Orchestration};
use serde::{Deserialize, Serialize};

#[derive(Deserialize, Default)]
#[serde(default)]
struct Question {
    question: Option<String>,
}

#[derive(Serialize)]
struct Answer {
    agent: &'static str,
    answer: String,
}

const EXPERTS: [&str; 2] = ["physicist", "chemist"];

fn parallel(ctx: &Context, input: Option<Question>) -> Result<Vec<Answer>, String> {
    let question = input
        .and_then(|q| q.question)
        .unwrap_or_else(|| "What is temperature?".to_string());
    let tasks = EXPERTS
        .iter()
        .map(|agent| ctx.call_agent(agent, question.clone()).schedule())
        .collect();
    let answers = ctx.when_all(tasks)?;
    Ok(EXPERTS
        .iter()
        .zip(answers)
        .map(|(agent, answer)| Answer { agent, answer })
        .collect())
}

fn component() -> Component {
    Component::new().orchestration(
        Orchestration::new("parallel", parallel)
            .description("Asks several experts one question at once")
            .route("orchestration/run"),
    )
}

agenthost_guest::export!(component);
