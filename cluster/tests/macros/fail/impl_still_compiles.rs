// A mistake in the attribute still emits the trait, so the impl below adds no error of its own.
#[cluster::service(name = "search", version = "1.0.0", timeout = "soon")]
pub trait Search {
    #[call(idempotent)]
    async fn ping(&self) -> u32;
}

struct Provider;

impl Search for Provider {
    async fn ping(&self) -> u32 {
        7
    }
}

fn main() {
    let _ = Provider;
}
