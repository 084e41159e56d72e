//! An ordinary shop, as a newcomer writes it: orders, inventory and payments, with ids, times,
//! money, error enums of several variants and a nested result. Every argument and result of
//! every function is traced: no shape is opaque.

use std::collections::BTreeMap;

use cluster::__private::FunctionShape;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Money {
    cents: i64,
    currency: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Line {
    sku: String,
    quantity: std::num::NonZeroU32,
    price: Money,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Status {
    Placed,
    Paid { at: chrono::DateTime<chrono::Utc> },
    Shipped { tracking: Option<String> },
    Cancelled(String),
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Order {
    id: uuid::Uuid,
    customer: u64,
    lines: Vec<Line>,
    status: Status,
    #[serde(default)]
    notes: BTreeMap<String, String>,
    placed: std::time::SystemTime,
}

#[derive(Debug, Clone, Serialize, Deserialize, thiserror::Error)]
enum OrderError {
    #[error("no order {0}")]
    NotFound(uuid::Uuid),
    #[error("stock: {0}")]
    Stock(StockError),
    #[error("payment: {0}")]
    Payment(PaymentError),
}

#[derive(Debug, Clone, Serialize, Deserialize, thiserror::Error)]
enum StockError {
    #[error("unknown sku {0}")]
    UnknownSku(String),
    #[error("only {left} of {sku} left")]
    OutOfStock { sku: String, left: u32 },
    #[error("closed")]
    Closed,
}

#[derive(Debug, Clone, Serialize, Deserialize, thiserror::Error)]
enum PaymentError {
    #[error("declined: {reason}")]
    Declined {
        reason: String,
        retry_after: Option<std::time::Duration>,
    },
    #[error("insufficient funds")]
    Insufficient(Money),
    #[error("card expired")]
    Expired,
}

#[cluster::service(name = "orders", version = "1.0.0")]
trait Orders {
    async fn place(&self, customer: u64, lines: Vec<Line>) -> Result<Order, OrderError>;
    #[call(idempotent)]
    async fn get(&self, id: uuid::Uuid) -> Result<Option<Order>, OrderError>;
    #[call(idempotent)]
    async fn list(&self, customer: u64, page: (u32, u32)) -> Vec<Order>;
}

#[cluster::service(name = "inventory", version = "1.0.0")]
trait Inventory {
    async fn reserve(&self, sku: String, n: u32) -> Result<u32, StockError>;
    #[call(idempotent)]
    async fn levels(&self) -> BTreeMap<String, u32>;
}

#[cluster::service(name = "payments", version = "1.0.0")]
trait Payments {
    async fn charge(&self, order: uuid::Uuid, amount: Money) -> Result<u128, PaymentError>;
    #[call(idempotent)]
    async fn refund(&self, charge: u128, at: time::OffsetDateTime) -> Result<(), PaymentError>;
}

fn opaque(shape: &FunctionShape) -> bool {
    let text = shape.to_string();
    // An opaque type is written between backticks.
    text.contains('`')
}

#[test]
fn every_function_of_the_shop_is_traced() {
    let descriptions = [
        OrdersClient::description(),
        InventoryClient::description(),
        PaymentsClient::description(),
    ];
    let mut seen = 0;
    for description in descriptions {
        for function in &description.functions {
            let shape = function.shape.as_ref().expect("a shape");
            assert!(
                !opaque(shape),
                "{}.{}: {shape}",
                description.name,
                function.name
            );
            seen += 1;
        }
    }
    assert_eq!(seen, 7);
    let place = &OrdersClient::description().functions[0];
    assert!(
        place.shape.as_ref().unwrap().to_string().ends_with(
            "-> enum{Ok({id: bytes, customer: u64, lines: [{sku: str, quantity: u32, \
             price: {cents: i64, currency: str}}], status: enum{placed, paid{at: str}, \
             shipped{tracking?: option<str>}, cancelled(str)}, notes?: map<str, str>, \
             placed: {secs_since_epoch: u64, nanos_since_epoch: u32}!}), \
             Err(enum{NotFound(bytes), Stock(enum{UnknownSku(str), \
             OutOfStock{sku: str, left: u32}, Closed}), Payment(enum{Declined{reason: str, \
             retry_after?: option<{secs: u64, nanos: u32}!>}, \
             Insufficient({cents: i64, currency: str}), Expired})})}"
        ),
        "{}",
        place.shape.as_ref().unwrap()
    );
}
