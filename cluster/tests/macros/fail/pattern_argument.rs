#[cluster::service(name = "search", version = "1.0.0")]
pub trait Search {
    async fn add(&self, (a, b): (u32, u32)) -> u32;
    async fn double(&self, mut value: u32) -> u32;
}

fn main() {}
