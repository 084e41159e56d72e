#[cluster::service(name = "search", version = "1.0.0")]
#[call(idempotent)]
pub trait Search {
    async fn ping(&self);
}

fn main() {}
