#[cluster::service(name = "search", version = "1.0.0")]
pub trait Search {
    #[call(retry(after = "100ms"), retry = false)]
    async fn ping(&self);
}

fn main() {}
