#[cluster::service(name = "bank", version = "1.0.0")]
pub trait Bank {
    #[call(idempotent, at_most_once)]
    async fn deposit(&self, cents: u64) -> u64;
}

fn main() {}
