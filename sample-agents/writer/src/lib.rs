//! `writer`: refines short pieces of text. No tools; the smallest useful agent.

use agenthost_guest::{Agent, Component};

fn component() -> Component {
    Component::new().agent(
        Agent::new("writer")
            .description("Refines short pieces of text")
            .instructions(
                "You refine short pieces of text. When given an initial sentence you enhance it; \
                 when given an improved sentence you polish it further.",
            ),
    )
}

agenthost_guest::export!(component);
