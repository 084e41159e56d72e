#[cluster::service(name = "search", version = "1.0.0")]
pub trait Search {
    #[call(idempotant)]
    async fn ping(&self);
}

fn main() {}
