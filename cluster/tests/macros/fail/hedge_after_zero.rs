#[cluster::service(name = "search", version = "1.0.0")]
pub trait Search {
    // A copy at once: every hedge would go with the first attempt.
    #[call(idempotent, hedge(after = "0ms", max = 2))]
    async fn search(&self, query: String) -> Vec<String>;
}

#[cluster::service(name = "suggest", version = "1.0.0", hedge(after = "0s", max = 1))]
pub trait Suggest {
    #[call(idempotent)]
    async fn suggest(&self, prefix: String) -> Vec<String>;
}

fn main() {}
