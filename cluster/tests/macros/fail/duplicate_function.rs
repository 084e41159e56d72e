#[cluster::service(name = "search", version = "1.0.0")]
pub trait Search {
    async fn ping(&self);
    async fn ping(&self, times: u32);
}

fn main() {}
