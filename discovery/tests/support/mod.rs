//! Shared helpers for the discovery tests: in-process requests and instance bodies.
#![allow(dead_code, unreachable_pub)]

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, Request, StatusCode};
use cluster_discovery::server::{Access, RegistryServer, Service};
use http_body_util::BodyExt as _;

/// An answer, read whole.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Answer {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }

    pub fn content_type(&self) -> &str {
        self.headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
}

/// One request to an in-process server.
pub async fn call(
    svc: &Service,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: impl Into<Body>,
) -> Answer {
    let mut req = Request::builder().method(method).uri(path);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let res = svc.call(req.body(body.into()).unwrap()).await;
    let status = res.status();
    let headers = res.headers().clone();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    Answer {
        status,
        headers,
        body,
    }
}

pub async fn get_json(svc: &Service, path: &str) -> Answer {
    call(
        svc,
        Method::GET,
        path,
        &[("accept", "application/json")],
        Body::empty(),
    )
    .await
}

/// A registration body as the js client sends it (no lease, no timestamps).
pub fn js_body(app: &str, id: &str, port: u16) -> String {
    serde_json::json!({"instance": {
        "app": app, "instanceId": id, "hostName": "127.0.0.1", "ipAddr": "127.0.0.1",
        "port": {"$": port, "@enabled": "true"}, "vipAddress": app.to_lowercase(),
        "dataCenterInfo": {"@class": "com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo", "name": "MyOwn"},
        "status": "UP"
    }})
    .to_string()
}

pub async fn register(svc: &Service, app: &str, id: &str) -> Answer {
    call(
        svc,
        Method::POST,
        &format!("/eureka/apps/{app}"),
        &[("content-type", "application/json")],
        js_body(app, id, 8080),
    )
    .await
}

pub async fn heartbeat(svc: &Service, app: &str, id: &str) -> StatusCode {
    call(
        svc,
        Method::PUT,
        &format!("/eureka/apps/{app}/{id}"),
        &[],
        Body::empty(),
    )
    .await
    .status
}

/// The instance ids of every application in a JSON `applications` document.
pub fn ids(doc: &serde_json::Value) -> Vec<String> {
    let mut out: Vec<String> = doc["applications"]["application"]
        .as_array()
        .expect("`application` is always an array")
        .iter()
        .flat_map(|a| {
            a["instance"]
                .as_array()
                .expect("`instance` is always an array")
                .clone()
        })
        .map(|i| i["instanceId"].as_str().unwrap().to_owned())
        .collect();
    out.sort();
    out
}

/// A server for a test that is not about credentials: open, said by name, as a server given no
/// `Access` refuses to start (`discovery/tests/server/security.rs` tests the credentials).
pub fn open_server() -> RegistryServer {
    RegistryServer::new().access(Access::open())
}

/// A server on a free loopback port that answers reads at once: no warm-up, as a server with
/// nothing registered before it (or one up for a while) needs none. Open (`open_server`).
pub async fn answering_server() -> cluster_discovery::server::RunningServer {
    let mut config = cluster_discovery::server::ServerConfig::default();
    config.warm_up = false;
    open_server()
        .config(config)
        .start(([127, 0, 0, 1], 0).into())
        .await
        .unwrap()
}
