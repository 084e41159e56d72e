#[cluster::service(name = "search", version = "1.0.0")]
pub trait Search {
    async fn search(&self, query: impl Into<String>) -> u32;
}

fn main() {}
