//! The signals that stop the long-running commands: Ctrl-C (SIGINT) and SIGTERM, what container
//! runtimes and process supervisors send.

/// Exit code after a second signal cut a graceful stop short (128 + SIGINT, as shells report it).
pub const EXIT_INTERRUPTED: i32 = 130;

/// Resolves on the next Ctrl-C or SIGTERM. A signal whose handler cannot be installed is never
/// awaited rather than failing the command.
pub async fn termination() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut terminate) => {
                terminate.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
}
