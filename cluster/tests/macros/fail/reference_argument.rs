#[cluster::service(name = "search", version = "1.0.0")]
pub trait Search {
    async fn search(&self, query: &str) -> u32;
}

fn main() {}
