#[cluster::service(name = "search", version = "1.0.0")]
pub trait Search {
    #[call(timeout = "0s")]
    async fn ping(&self);
}

fn main() {}
