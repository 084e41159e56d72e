#[cluster::service(name = "search", version = "1.0.0")]
pub trait Search {
    #[cfg(unix)]
    async fn reindex(&self);
    async fn ping(&self);
}

fn main() {}
