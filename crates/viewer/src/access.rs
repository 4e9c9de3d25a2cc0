//! Who may use the server.
//!
//! Any web page the user visits can make the browser send requests to a port on this machine,
//! open a WebSocket to it, or, through DNS rebinding (a name of the attacker's that resolves to
//! 127.0.0.1), read what it answers as if it were same-origin. So:
//!
//! - every request must name the server by a `Host` it was started for (on loopback:
//!   `127.0.0.1:PORT`, `localhost:PORT`, `[::1]:PORT`; on a given address: that address);
//! - a WebSocket upgrade that carries an `Origin` (every browser's does) must come from the
//!   server's own page, `http://` + that `Host`; a client without one (a script, `trainer bench
//!   view`) is not a browser page and cannot be driven by one;
//! - off loopback, every request must also carry the token the server printed at start-up in its
//!   URL (`/?token=...`): opening that URL sets it as a cookie (`HttpOnly`, `SameSite=Strict`)
//!   that the page's later requests carry. Listening on every address (`0.0.0.0`), the token is
//!   the only check of the `Host`, which can then be any name.

use std::net::SocketAddr;

use axum::http::HeaderMap;
use axum::http::header;

use crate::ViewerError;

/// The cookie that carries the token.
const COOKIE: &str = "ember_token";

/// What the server accepts.
#[derive(Debug, Clone)]
pub(crate) struct Access {
    /// The `Host` values accepted; `None` when listening on every address (any name reaches it).
    hosts: Option<Vec<String>>,
    /// The token asked for off loopback.
    token: Option<String>,
}

/// A request let through.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Grant {
    /// Nothing to add to the response.
    Plain,
    /// The token came in the query: set the cookie so the page's later requests carry it.
    SetCookie,
}

impl Access {
    /// The rules for a server listening on `address` (the bound one, its port known).
    pub(crate) fn for_address(address: SocketAddr) -> Result<Access, ViewerError> {
        let port = address.port();
        let ip = address.ip();
        let names = |hosts: &[String]| -> Vec<String> {
            hosts
                .iter()
                .flat_map(|h| {
                    // A browser leaves out port 80 from `Host`.
                    let bare = (port == 80).then(|| h.clone());
                    std::iter::once(format!("{h}:{port}")).chain(bare)
                })
                .collect()
        };
        if ip.is_loopback() {
            let hosts = ["127.0.0.1", "localhost", "[::1]"].map(String::from);
            return Ok(Access {
                hosts: Some(names(&hosts)),
                token: None,
            });
        }
        let hosts = (!ip.is_unspecified()).then(|| {
            let name = match ip {
                std::net::IpAddr::V4(v4) => v4.to_string(),
                std::net::IpAddr::V6(v6) => format!("[{v6}]"),
            };
            names(&[name])
        });
        Ok(Access {
            hosts,
            token: Some(new_token()?),
        })
    }

    /// The token to put in the URL, when one is needed.
    pub(crate) fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// Checks a request's `Host` and token (`query`: the URL's query string).
    pub(crate) fn check(&self, headers: &HeaderMap, query: Option<&str>) -> Result<Grant, String> {
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("");
        if let Some(hosts) = &self.hosts
            && !hosts.iter().any(|h| h.eq_ignore_ascii_case(host))
        {
            return Err(format!(
                "this server answers to {}, not to the host `{host}`",
                hosts.join(", ")
            ));
        }
        let Some(token) = &self.token else {
            return Ok(Grant::Plain);
        };
        let in_query = query.is_some_and(|q| {
            q.split('&')
                .any(|pair| pair.strip_prefix("token=") == Some(token.as_str()))
        });
        if in_query {
            return Ok(Grant::SetCookie);
        }
        let in_cookie = headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|c| c.to_str().ok())
            .flat_map(|c| c.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .any(|(name, value)| name == COOKIE && value == token);
        if in_cookie {
            Ok(Grant::Plain)
        } else {
            Err("open the URL the viewer printed at start-up: it carries the access token".into())
        }
    }

    /// Checks a WebSocket upgrade's `Origin` (after [`Access::check`] accepted its `Host`).
    pub(crate) fn check_origin(headers: &HeaderMap) -> Result<(), String> {
        let Some(origin) = headers.get(header::ORIGIN) else {
            return Ok(());
        };
        let origin = origin.to_str().unwrap_or("");
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("");
        if origin.eq_ignore_ascii_case(&format!("http://{host}")) {
            Ok(())
        } else {
            Err(format!(
                "WebSocket from the page at `{origin}` refused: only the viewer's own page may connect"
            ))
        }
    }

    /// The `Set-Cookie` value that stores the token.
    pub(crate) fn cookie(&self) -> Option<String> {
        self.token
            .as_ref()
            .map(|t| format!("{COOKIE}={t}; Path=/; HttpOnly; SameSite=Strict"))
    }
}

/// 128 random bits from the operating system, as hex.
fn new_token() -> Result<String, ViewerError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|e| ViewerError::Runtime(format!("no randomness for the access token: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            let name = axum::http::HeaderName::from_static(name);
            map.append(name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn loopback_answers_its_own_names_only_and_needs_no_token() {
        let access = Access::for_address("127.0.0.1:7878".parse().unwrap()).unwrap();
        assert!(access.token().is_none());
        for host in [
            "127.0.0.1:7878",
            "localhost:7878",
            "LOCALHOST:7878",
            "[::1]:7878",
        ] {
            let ok = access.check(&headers(&[("host", host)]), None);
            assert_eq!(ok, Ok(Grant::Plain), "{host}");
        }
        for host in ["attacker.test", "attacker.test:7878", "127.0.0.1:80", ""] {
            let refused = access.check(&headers(&[("host", host)]), None);
            assert!(refused.unwrap_err().contains("answers to"), "{host}");
        }
        assert!(access.check(&HeaderMap::new(), None).is_err());
    }

    #[test]
    fn off_loopback_the_token_comes_in_the_url_then_the_cookie() {
        let access = Access::for_address("0.0.0.0:8000".parse().unwrap()).unwrap();
        let token = access.token().unwrap().to_string();
        assert_eq!(token.len(), 32);
        let host = ("host", "anything.example:8000");
        let bare = access.check(&headers(&[host]), None);
        assert!(bare.unwrap_err().contains("token"));
        let wrong = access.check(&headers(&[host]), Some("token=0123"));
        assert!(wrong.is_err());
        let query = format!("x=1&token={token}");
        let granted = access.check(&headers(&[host]), Some(&query));
        assert_eq!(granted, Ok(Grant::SetCookie));
        let cookie = format!("a=b; ember_token={token}");
        let with_cookie = access.check(&headers(&[host, ("cookie", &cookie)]), None);
        assert_eq!(with_cookie, Ok(Grant::Plain));
        assert!(access.cookie().unwrap().contains("HttpOnly"));
        let other = Access::for_address("0.0.0.0:8000".parse().unwrap()).unwrap();
        assert_ne!(other.token(), access.token());
    }

    #[test]
    fn a_given_address_answers_its_own_name_and_needs_the_token() {
        let access = Access::for_address("192.168.1.5:9000".parse().unwrap()).unwrap();
        let token = format!("token={}", access.token().unwrap());
        let own = access.check(&headers(&[("host", "192.168.1.5:9000")]), Some(&token));
        assert_eq!(own, Ok(Grant::SetCookie));
        let rebound = access.check(&headers(&[("host", "evil.test:9000")]), Some(&token));
        assert!(rebound.is_err());
    }

    #[test]
    fn websocket_origins_must_be_the_page_itself() {
        let host = ("host", "127.0.0.1:7878");
        assert!(Access::check_origin(&headers(&[host])).is_ok());
        let own = ("origin", "http://127.0.0.1:7878");
        assert!(Access::check_origin(&headers(&[host, own])).is_ok());
        for origin in [
            "http://evil.example",
            "http://127.0.0.1:9999",
            "null",
            "https://127.0.0.1:7878",
        ] {
            let refused = Access::check_origin(&headers(&[host, ("origin", origin)]));
            assert!(refused.unwrap_err().contains("refused"), "{origin}");
        }
    }
}
