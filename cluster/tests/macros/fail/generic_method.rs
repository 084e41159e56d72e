#[cluster::service(name = "search", version = "1.0.0")]
pub trait Search {
    async fn search<Q>(&self, query: Q) -> u32;
}

fn main() {}
