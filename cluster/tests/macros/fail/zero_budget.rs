#[cluster::service(name = "search", version = "1.0.0", retry(budget = "0ms"))]
pub trait Search {
    async fn ping(&self);
}

fn main() {}
