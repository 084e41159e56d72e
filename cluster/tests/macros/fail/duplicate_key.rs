#[cluster::service(name = "search", version = "1.0.0", timeout = "5s", timeout = "10s")]
pub trait Search {
    #[call(retry = true, idempotent, retry = false)]
    async fn ping(&self);
}

fn main() {}
