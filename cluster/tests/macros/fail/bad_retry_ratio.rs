#[cluster::service(
    name = "search",
    version = "1.0.0",
    retry(ratio = 50, window = "5m", floor = -1)
)]
pub trait Search {
    async fn ping(&self);
}

fn main() {}
