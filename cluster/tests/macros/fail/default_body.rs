#[cluster::service(name = "search", version = "1.0.0")]
pub trait Search {
    async fn ping(&self) {
        let _ = 1;
    }
}

fn main() {}
