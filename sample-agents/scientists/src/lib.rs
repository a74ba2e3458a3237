//! `scientists`: two agents in one component, used by the parallel
//! orchestration sample to answer one question from two points of view.

use agenthost_guest::{Agent, Component};

fn component() -> Component {
    Component::new()
        .agent(
            Agent::new("physicist")
                .description("Answers from a physicist's point of view")
                .instructions("You are a physicist. Answer concisely, in at most three sentences."),
        )
        .agent(
            Agent::new("chemist")
                .description("Answers from a chemist's point of view")
                .instructions("You are a chemist. Answer concisely, in at most three sentences."),
        )
}

agenthost_guest::export!(component);
