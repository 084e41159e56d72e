//! Client and provider layers, over real TCP.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use cluster::context::{Context, Metadata};
use cluster::layer::{CallInfo, ClientLayer, Outcome, ProviderLayer, Refusal, Served};
use cluster::{CallError, Reason};

use crate::{Net, OrdersClient, Plan};

#[derive(Default, Clone)]
struct Log(Arc<Mutex<Vec<String>>>);

impl Log {
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut self.0.lock().unwrap())
    }

    /// Logs how a request was served, as `function Outcome`.
    fn served(&self, ctx: &Context, served: Served) {
        self.0
            .lock()
            .unwrap()
            .push(format!("{} {served:?}", ctx.function()));
    }
}

/// Puts a tenant on every call and logs every outcome.
struct Tenant(Log);

impl ClientLayer for Tenant {
    fn on_call(&self, call: &CallInfo<'_>, metadata: &mut Metadata) -> Result<(), String> {
        if call.function == "place" {
            return Err("placing orders is off today".into());
        }
        metadata.insert("tenant", "acme");
        Ok(())
    }

    fn on_outcome(&self, call: &CallInfo<'_>, outcome: Outcome<'_>, _elapsed: Duration) {
        let outcome = match outcome {
            Outcome::Ok => "ok".to_owned(),
            Outcome::App => "app".to_owned(),
            Outcome::Failed(e) => format!("failed: {}", e.report().attempts.len()),
            _ => "other".to_owned(),
        };
        self.0
            .0
            .lock()
            .unwrap()
            .push(format!("{}.{} {outcome}", call.service, call.function));
    }
}

/// Serves only callers that name a tenant; logs what it served.
struct RequireTenant(Log);

impl ProviderLayer for RequireTenant {
    fn on_request(&self, ctx: &Context) -> Result<(), Refusal> {
        match ctx.metadata().get("tenant") {
            Some(_) => Ok(()),
            None => Err(Refusal::rejected(format!(
                "{} named no tenant",
                ctx.caller().unwrap_or("?")
            ))),
        }
    }

    fn on_served(&self, ctx: &Context, served: Served, _elapsed: Duration) {
        self.0.served(ctx, served);
    }
}

#[tokio::test]
async fn a_provider_layer_refuses_before_the_handler_and_a_client_layer_adds_and_observes() {
    let net = Net::tcp();
    let served = Log::default();
    let orders = net
        .builder("orders-1")
        .provider_layer(RequireTenant(served.clone()))
        .start()
        .await
        .unwrap();
    let shop = Arc::new(crate::Shop::new(&orders, Plan::Pay));
    let _r = orders.serve(crate::OrdersServer::new(shop)).await.unwrap();

    let plain = net.node("plain").await;
    let err = OrdersClient::new(&plain).whoami().await.unwrap_err();
    let CallError::Service(e) = &err else {
        panic!("expected a ServiceError, got {err:?}")
    };
    assert_eq!(e.reason(), Reason::Rejected);
    assert_eq!(e.report().attempts.len(), 1, "a rejection is never retried");
    assert!(
        e.detail().contains("plain named no tenant"),
        "{}",
        e.detail()
    );
    assert!(served.take().is_empty(), "the handler did not run");

    let outcomes = Log::default();
    let tenanted = net
        .builder("tenanted")
        .client_layer(Tenant(outcomes.clone()))
        .start()
        .await
        .unwrap();
    let client = OrdersClient::new(&tenanted);
    let seen = client.whoami().await.unwrap();
    assert_eq!(seen.tenant.as_deref(), Some("acme"));
    assert_eq!(served.take(), ["whoami Done"]);

    let err = client.place("book".into()).await.unwrap_err();
    let CallError::Service(e) = &err else {
        panic!("expected a ServiceError, got {err:?}")
    };
    assert_eq!(e.reason(), Reason::Rejected);
    assert!(e.detail().contains("placing orders is off today"));
    assert_eq!(
        outcomes.take(),
        ["orders.whoami ok", "orders.place failed: 0"]
    );
}

#[tokio::test]
async fn metadata_over_its_bounds_fails_before_it_is_sent() {
    let net = Net::tcp();
    let (_orders, _shop) = net.shop("orders-1", Plan::Pay).await;
    let client = OrdersClient::new(&net.node("web-1").await);
    let big = "x".repeat(cluster::context::MAX_METADATA_BYTES);
    let err = client.whoami().metadata("blob", big).await.unwrap_err();
    let CallError::Rpc(e) = &err else {
        panic!("expected an RpcError, got {err:?}")
    };
    assert_eq!(e.kind(), cluster::RpcErrorKind::TooLarge);
    assert!(e.report().attempts.is_empty());
    assert!(!err.may_have_run());
}

/// Panics, to show that a provider's own layer cannot take its node down.
struct Broken;

impl ProviderLayer for Broken {
    fn on_request(&self, ctx: &Context) -> Result<(), Refusal> {
        if ctx.function() == "whoami" {
            panic!("the layer has a bug");
        }
        Ok(())
    }
}

#[tokio::test]
async fn a_panicking_provider_layer_refuses_that_call_as_panicked_and_the_node_serves_on() {
    let net = Net::tcp();
    let orders = net
        .builder("orders-1")
        .provider_layer(Broken)
        .start()
        .await
        .unwrap();
    let shop = Arc::new(crate::Shop::new(&orders, Plan::Pay));
    let _r = orders.serve(crate::OrdersServer::new(shop)).await.unwrap();
    let (_payments, _bank) = net.bank("payments-1", Duration::ZERO).await;
    let client = OrdersClient::new(&net.node("web-1").await);

    let err = client.whoami().await.unwrap_err();
    let CallError::Service(e) = &err else {
        panic!("expected a ServiceError, got {err:?}")
    };
    assert_eq!(e.reason(), Reason::Panicked);
    assert!(e.detail().contains("the layer has a bug"), "{}", e.detail());
    assert_eq!(e.report().attempts.len(), 1);
    client
        .place("book".into())
        .await
        .expect("other calls are served");
}

#[tokio::test]
async fn a_provider_layer_hears_of_a_request_its_caller_gave_up_on() {
    let net = Net::tcp();
    let served = Log::default();
    let payments = net
        .builder("payments-1")
        .provider_layer(RequireTenant(served.clone()))
        .start()
        .await
        .unwrap();
    let bank = Arc::new(crate::Bank::new(&payments, Duration::from_secs(30)));
    let _r = payments
        .serve(crate::PaymentsServer::new(bank.clone()))
        .await
        .unwrap();
    let client = crate::PaymentsClient::new(&net.node("web-1").await);
    let call = client.charge(1).metadata("tenant", "acme");
    let gave_up = tokio::time::timeout(Duration::from_millis(300), call).await;
    assert!(gave_up.is_err());
    crate::support::until("the layer hears", || !served.0.lock().unwrap().is_empty()).await;
    assert_eq!(served.take(), ["charge Cancelled"]);
}

/// Counts requests in flight, as a metrics layer would.
struct Gauge(Arc<std::sync::atomic::AtomicI64>);

impl ProviderLayer for Gauge {
    fn on_request(&self, _ctx: &Context) -> Result<(), Refusal> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    fn on_served(&self, _ctx: &Context, _served: Served, _elapsed: Duration) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Panics when it sees a call, and when it hears how one ended.
struct Clumsy;

impl ClientLayer for Clumsy {
    fn on_call(&self, call: &CallInfo<'_>, _metadata: &mut Metadata) -> Result<(), String> {
        if call.function == "place" {
            panic!("on_call has a bug");
        }
        Ok(())
    }

    fn on_outcome(&self, _call: &CallInfo<'_>, _outcome: Outcome<'_>, _elapsed: Duration) {
        panic!("on_outcome has a bug");
    }
}

#[tokio::test]
async fn layers_before_a_refusing_one_hear_the_end_and_a_panicking_client_layer_loses_nothing() {
    let net = Net::tcp();
    let gauge = Arc::new(std::sync::atomic::AtomicI64::new(0));
    let orders = net
        .builder("orders-1")
        .provider_layer(Gauge(gauge.clone()))
        .provider_layer(RequireTenant(Log::default()))
        .start()
        .await
        .unwrap();
    let shop = Arc::new(crate::Shop::new(&orders, Plan::Pay));
    let _r = orders.serve(crate::OrdersServer::new(shop)).await.unwrap();
    let client = OrdersClient::new(&net.node("plain").await);
    for _ in 0..10 {
        assert!(client.whoami().await.is_err(), "refused: no tenant");
    }
    assert_eq!(
        gauge.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "nothing leaked"
    );

    let clumsy = net
        .builder("clumsy")
        .client_layer(Clumsy)
        .start()
        .await
        .unwrap();
    let client = OrdersClient::new(&clumsy);
    let seen = client.whoami().metadata("tenant", "acme").await;
    assert!(
        seen.is_ok(),
        "the result survives a panic in on_outcome: {seen:?}"
    );
    let err = client.place("book".into()).await.unwrap_err();
    let CallError::Service(e) = &err else {
        panic!("expected a ServiceError, got {err:?}")
    };
    assert_eq!(e.reason(), Reason::Rejected);
    assert!(e.detail().contains("on_call has a bug"), "{}", e.detail());
}

/// Logs only how each request was served.
struct Record(Log);

impl ProviderLayer for Record {
    fn on_served(&self, ctx: &Context, served: Served, _elapsed: Duration) {
        self.0.served(ctx, served);
    }
}

#[tokio::test]
async fn a_handler_stopped_at_its_deadline_is_told_to_the_layers_as_expired() {
    for net in [Net::tcp(), Net::memory()] {
        let served = Log::default();
        let orders = net
            .builder("orders-1")
            .provider_layer(Record(served.clone()))
            .start()
            .await
            .unwrap();
        let mut shop = crate::Shop::new(&orders, Plan::Pay);
        // Never opened: `place` waits past any deadline.
        shop.gate = Some(Arc::new(tokio::sync::Notify::new()));
        let _r = orders
            .serve(crate::OrdersServer::new(Arc::new(shop)))
            .await
            .unwrap();
        let client = OrdersClient::new(&net.node("web-1").await);
        let err = client
            .place("book".into())
            .timeout(Duration::from_millis(200))
            .no_retry()
            .await
            .unwrap_err();
        assert!(matches!(&err, CallError::Rpc(e) if e.kind() == cluster::RpcErrorKind::Timeout));
        // The transport stops the handler at the deadline; wait for the layer to hear of it.
        crate::support::until("the layer hears of it", || {
            !served.0.lock().unwrap().is_empty()
        })
        .await;
        assert_eq!(served.take(), ["place Expired"]);
    }
}
