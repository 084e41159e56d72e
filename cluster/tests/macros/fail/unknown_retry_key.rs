#[cluster::service(
    name = "search",
    version = "1.0.0",
    retry(after = "1s", backoff = "2s")
)]
pub trait Search {
    async fn ping(&self);
}

fn main() {}
