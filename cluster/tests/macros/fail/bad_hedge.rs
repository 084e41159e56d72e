#[cluster::service(name = "search", version = "1.0.0")]
pub trait Search {
    #[call(idempotent, hedge(max = 0))]
    async fn search(&self, query: String) -> Vec<String>;
    #[call(idempotent, hedge = "20ms")]
    async fn suggest(&self, prefix: String) -> Vec<String>;
}

fn main() {}
