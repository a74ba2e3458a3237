//! Where a guest's outbound request may connect: the addresses a granted name
//! resolves to, less those inside the host's own network.
//!
//! A grant names a host; DNS decides the address. A name that resolves to a
//! loopback, private, link-local or metadata address would let a guest reach
//! the host's own management API, a database on the same machine or a cloud
//! metadata service through a perfectly ordinary-looking grant. So the
//! resolved addresses are checked, and the connection is made to an address
//! that passed the check (never by resolving the name a second time, which a
//! rebinding DNS server could answer differently). Only a grant that names
//! the address itself (`127.0.0.1:8080`, `[::1]:8080`) or `localhost` reaches
//! inside.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

/// Host-wide settings of guests' outbound connections.
#[derive(Debug, Clone, Default)]
pub struct NetworkPolicy {
    /// Names answered without DNS (`--resolve NAME=ADDR`), as curl's
    /// `--resolve` does: for split-horizon names, and for tests.
    pins: HashMap<String, Vec<IpAddr>>,
}

/// Why a `--resolve` setting was refused.
#[derive(Debug, thiserror::Error)]
#[error(
    "'{0}' is not a resolve setting: write NAME=ADDRESS[,ADDRESS…], e.g. api.internal=10.0.0.7"
)]
pub struct ResolveSettingError(String);

/// Why a destination was refused or could not be resolved.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Refusal {
    #[error("'{host}' did not resolve: {reason}")]
    Dns { host: String, reason: String },
    #[error("'{host}' resolves only to addresses inside the host's network ({addresses}); grant the address itself to reach it")]
    Internal { host: String, addresses: String },
}

impl NetworkPolicy {
    /// From `NAME=ADDR[,ADDR…]` settings.
    pub fn from_settings(settings: &[String]) -> Result<Self, ResolveSettingError> {
        let mut pins = HashMap::new();
        for setting in settings {
            let refuse = || ResolveSettingError(setting.clone());
            let (name, addresses) = setting.split_once('=').ok_or_else(refuse)?;
            let name = name.trim().to_ascii_lowercase();
            if name.is_empty() {
                return Err(refuse());
            }
            let addresses = addresses
                .split(',')
                .map(|a| a.trim().parse::<IpAddr>().map_err(|_| refuse()))
                .collect::<Result<Vec<_>, _>>()?;
            pins.insert(name, addresses);
        }
        Ok(Self { pins })
    }

    /// The addresses `host` may be reached at on `port`, in resolver order.
    /// `names_inside`: the grant names this very address (or `localhost`),
    /// so addresses inside the host's network are allowed.
    pub(crate) async fn addresses(
        &self,
        host: &str,
        port: u16,
        names_inside: bool,
        timeout: Duration,
    ) -> Result<Vec<SocketAddr>, Refusal> {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let resolved: Vec<SocketAddr> = if let Ok(ip) = bare.parse::<IpAddr>() {
            vec![SocketAddr::new(ip, port)]
        } else if let Some(pinned) = self.pins.get(&bare.to_ascii_lowercase()) {
            pinned.iter().map(|ip| SocketAddr::new(*ip, port)).collect()
        } else {
            let dns = |reason: String| Refusal::Dns {
                host: host.to_string(),
                reason,
            };
            tokio::time::timeout(timeout, tokio::net::lookup_host((bare, port)))
                .await
                .map_err(|_| {
                    dns(format!(
                        "no answer within {}",
                        humantime::format_duration(timeout)
                    ))
                })?
                .map_err(|e| dns(e.to_string()))?
                .collect()
        };
        if names_inside {
            return Ok(resolved);
        }
        let (outside, inside): (Vec<SocketAddr>, Vec<SocketAddr>) =
            resolved.into_iter().partition(|a| !is_inside(a.ip()));
        if outside.is_empty() {
            let addresses = inside
                .iter()
                .map(|a| a.ip().to_string())
                .collect::<Vec<_>>()
                .join(", ");
            return Err(Refusal::Internal {
                host: host.to_string(),
                addresses,
            });
        }
        Ok(outside)
    }
}

/// Whether `ip` belongs to the host's own network rather than the internet:
/// loopback, unspecified, private (RFC 1918, unique local), shared
/// (carrier-grade NAT), link-local (which holds the cloud metadata service,
/// 169.254.169.254), multicast and broadcast. IPv4 written inside IPv6
/// (`::ffff:127.0.0.1`) is judged as the IPv4 address it is.
pub(crate) fn is_inside(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_inside_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped().or_else(|| nat64(v6)) {
            Some(v4) => is_inside_v4(v4),
            None => is_inside_v6(v6),
        },
    }
}

fn is_inside_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_multicast()
        || ip.is_broadcast()
        || a == 0
        // 100.64.0.0/10, shared address space (carrier-grade NAT, some VPCs).
        || (a == 100 && (64..128).contains(&b))
}

/// The IPv4 address inside a NAT64 address (64:ff9b::/96, RFC 6052): on a
/// network with a NAT64 gateway it reaches that IPv4 address.
fn nat64(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    (s[..6] == [0x64, 0xff9b, 0, 0, 0, 0]).then(|| {
        let [.., a, b, c, d] = ip.octets();
        Ipv4Addr::new(a, b, c, d)
    })
}

fn is_inside_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        // fc00::/7, unique local (holds fd00:ec2::254, a metadata address).
        || (first & 0xfe00) == 0xfc00
        // fe80::/10, link-local.
        || (first & 0xffc0) == 0xfe80
        // ::/96, IPv4-compatible (deprecated, but routes to IPv4 inside).
        || ip.segments()[..6].iter().all(|s| *s == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn addresses_inside_the_hosts_network_are_recognised() {
        for inside in [
            "127.0.0.1",
            "127.8.9.10",
            "0.0.0.0",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fd00:ec2::254",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "64:ff9b::a9fe:a9fe",
        ] {
            assert!(is_inside(ip(inside)), "{inside}");
        }
        for outside in [
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "203.0.113.7",
            "2606:4700::1111",
            "64:ff9b::808:808",
        ] {
            assert!(!is_inside(ip(outside)), "{outside}");
        }
    }

    #[tokio::test]
    async fn a_name_resolving_inside_is_refused_unless_the_grant_names_it() {
        let policy = NetworkPolicy::from_settings(&[
            "cdn.test=127.0.0.1".into(),
            "mixed.test=10.0.0.1,203.0.113.7".into(),
        ])
        .unwrap();
        let wait = Duration::from_secs(1);
        let refused = policy.addresses("cdn.test", 80, false, wait).await;
        assert!(
            matches!(&refused, Err(Refusal::Internal { addresses, .. }) if addresses == "127.0.0.1"),
            "{refused:?}"
        );
        let literal = policy
            .addresses("127.0.0.1", 8080, true, wait)
            .await
            .unwrap();
        assert_eq!(literal, vec!["127.0.0.1:8080".parse().unwrap()]);
        assert!(policy.addresses("[::1]", 80, false, wait).await.is_err());
        // Of a name with addresses on both sides, only the outside ones are used.
        let mixed = policy
            .addresses("MIXED.test", 443, false, wait)
            .await
            .unwrap();
        assert_eq!(mixed, vec!["203.0.113.7:443".parse().unwrap()]);
    }

    #[test]
    fn bad_resolve_settings_are_refused() {
        for bad in ["cdn.test", "=127.0.0.1", "cdn.test=localhost", "a=1.2.3.4,"] {
            assert!(
                NetworkPolicy::from_settings(&[bad.into()]).is_err(),
                "{bad}"
            );
        }
    }
}
