//! A Redis server of a test's own.

use std::time::Duration;

/// A Redis server of the test's own, on a free port, so that stopping it
/// disturbs nobody else.
pub struct PrivateRedis {
    child: std::process::Child,
    pub url: String,
}

impl PrivateRedis {
    pub async fn start() -> Self {
        let port = super::free_port();
        let child = std::process::Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server (make test installs it)");
        // Owned (and so killed and waited for) from here on.
        let server = Self {
            child,
            url: format!("redis://127.0.0.1:{port}"),
        };
        for _ in 0..100 {
            if let Ok(client) = redis::Client::open(server.url.as_str()) {
                let connected = tokio::time::timeout(
                    Duration::from_secs(2),
                    client.get_multiplexed_async_connection(),
                )
                .await;
                if matches!(connected, Ok(Ok(_))) {
                    return server;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the private redis-server did not start");
    }

    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.stop();
    }
}
