#[cluster::service(name = "search", version = "1.0.0", retry(factor = 0.5))]
pub trait Search {
    async fn ping(&self);
}

fn main() {}
