//! Token management: list, revoke and rotate API tokens and wire access
//! keys, and tokens that expire. A revocation or an expiry takes effect at
//! the next request.

mod common;

use std::time::Duration;

use common::{call, env};
use serde_json::Value;

async fn list(env: &common::Env) -> Vec<Value> {
    let a = call(env, "GET", "/v1/tokens", Some(&env.admin), &[], "").await;
    assert_eq!(a.status, 200, "{}", a.text);
    a.json()["tokens"].as_array().unwrap().clone()
}

/// POST /v1/tokens with the admin token; the answer, which must be 201.
async fn create(env: &common::Env, body: &str) -> Value {
    let a = call(env, "POST", "/v1/tokens", Some(&env.admin), &[], body).await;
    assert_eq!(a.status, 201, "{body}: {}", a.text);
    a.json()
}

async fn health_with(env: &common::Env, token: &str) -> common::Answer {
    call(env, "GET", "/v1/events", Some(token), &[], "").await
}

#[tokio::test]
async fn a_revoked_token_is_refused_at_its_next_request() {
    let env = env().await;
    let a = create(&env, r#"{"tenant": "acme", "subject": "ci"}"#).await;
    let (token, id) = (
        a["token"].as_str().unwrap().to_owned(),
        a["id"].as_str().unwrap().to_owned(),
    );
    assert_eq!(health_with(&env, &token).await.status, 200);

    let listed = list(&env).await;
    let row = listed
        .iter()
        .find(|t| t["id"] == id.as_str())
        .expect("listed");
    assert_eq!(
        (
            row["tenant"].as_str(),
            row["subject"].as_str(),
            row["kind"].as_str()
        ),
        (Some("acme"), Some("ci"), Some("token"))
    );
    assert!(
        !listed.iter().any(|t| t.to_string().contains("pbx_")),
        "a listing shows no token"
    );

    // Only an admin may list or revoke.
    assert_eq!(
        call(&env, "GET", "/v1/tokens", Some(&env.acme), &[], "")
            .await
            .status,
        403
    );
    assert_eq!(
        call(
            &env,
            "DELETE",
            &format!("/v1/tokens/{id}"),
            Some(&env.acme),
            &[],
            ""
        )
        .await
        .status,
        403
    );

    let a = call(
        &env,
        "DELETE",
        &format!("/v1/tokens/{id}"),
        Some(&env.admin),
        &[],
        "",
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.text);
    let refused = health_with(&env, &token).await;
    assert_eq!(refused.status, 401, "{}", refused.text);
    assert!(!list(&env).await.iter().any(|t| t["id"] == id.as_str()));
    // Again: nothing to revoke.
    assert_eq!(
        call(
            &env,
            "DELETE",
            &format!("/v1/tokens/{id}"),
            Some(&env.admin),
            &[],
            ""
        )
        .await
        .status,
        404
    );
    // Other tokens are untouched.
    assert_eq!(health_with(&env, &env.acme).await.status, 200);
}

#[tokio::test]
async fn a_rotated_token_replaces_the_old_one() {
    let env = env().await;
    let a = create(&env, r#"{"tenant": "acme", "subject": "billing"}"#).await;
    let (old, id) = (
        a["token"].as_str().unwrap().to_owned(),
        a["id"].as_str().unwrap().to_owned(),
    );
    let a = call(
        &env,
        "POST",
        &format!("/v1/tokens/{id}/rotate"),
        Some(&env.admin),
        &[],
        "",
    )
    .await;
    assert_eq!(a.status, 201, "{}", a.text);
    let new = a.json()["token"].as_str().unwrap().to_owned();
    assert_eq!(a.json()["replaces"], id.as_str());
    assert_eq!(a.json()["subject"], "billing");
    assert_eq!(health_with(&env, &old).await.status, 401);
    assert_eq!(health_with(&env, &new).await.status, 200);
    assert_eq!(
        call(
            &env,
            "POST",
            "/v1/tokens/0000000000000000/rotate",
            Some(&env.admin),
            &[],
            ""
        )
        .await
        .status,
        404
    );
}

#[tokio::test]
async fn a_token_with_an_expiry_is_refused_after_it() {
    let env = env().await;
    for bad in [
        r#"{"tenant": "acme", "expires_in": 0}"#,
        r#"{"tenant": "acme", "expires_in": 999999999999}"#,
    ] {
        let a = call(&env, "POST", "/v1/tokens", Some(&env.admin), &[], bad).await;
        assert_eq!(a.status, 400, "{bad}: {}", a.text);
    }
    let a = create(&env, r#"{"tenant": "acme", "expires_in": 1}"#).await;
    assert!(a["expires_at"].is_string(), "{a}");
    let token = a["token"].as_str().unwrap().to_owned();
    assert_eq!(health_with(&env, &token).await.status, 200);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let refused = health_with(&env, &token).await;
    assert_eq!(refused.status, 401, "{}", refused.text);
    assert!(refused.text.contains("expired"), "{}", refused.text);
}

#[tokio::test]
async fn access_keys_are_listed_without_secrets_and_revoked() {
    let env = env().await;
    let a = create(&env, r#"{"aws": true, "admin": true}"#).await;
    let id = a["access_key_id"].as_str().unwrap().to_owned();
    let secret = a["secret_access_key"].as_str().unwrap().to_owned();
    let listed = list(&env).await;
    assert!(
        listed
            .iter()
            .any(|t| t["id"] == id.as_str() && t["kind"] == "access_key")
    );
    assert!(!listed.iter().any(|t| t.to_string().contains(&secret)));
    let a = call(
        &env,
        "DELETE",
        &format!("/v1/tokens/{id}"),
        Some(&env.admin),
        &[],
        "",
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.text);
    assert!(
        !postbox_server::auth::access_key_exists(&env.store, &id)
            .await
            .unwrap()
    );
}

/// A token the server has just accepted (and keeps in memory) is refused at
/// its next request once its row is gone, however the row went: here a
/// DeleteItem straight on the store, not the revoke endpoint.
#[tokio::test]
async fn a_token_whose_row_is_deleted_is_refused_at_its_next_request() {
    use postbox_item::{AttributeValue, Item};
    use postbox_store::ItemStore;
    use postbox_store::api::DeleteItemInput;

    let env = env().await;
    let a = create(&env, r#"{"tenant": "acme", "subject": "ci"}"#).await;
    let token = a["token"].as_str().unwrap().to_owned();
    for _ in 0..3 {
        assert_eq!(health_with(&env, &token).await.status, 200);
    }
    let mut key = Item::new();
    key.insert(
        "pk".into(),
        AttributeValue::s(format!("TOKEN#{}", postbox_api::auth::token_hash(&token))),
    );
    let deleted = env
        .store
        .delete_item(DeleteItemInput {
            table_name: postbox_topology::TOKENS_TABLE.into(),
            key,
            return_values: postbox_store::api::ReturnValue::AllOld,
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(deleted.attributes.is_some(), "the token's row was there");
    let refused = health_with(&env, &token).await;
    assert_eq!(
        (refused.status, refused.code()),
        (401, "unauthorized".into())
    );
    // Other tokens keep working.
    assert_eq!(health_with(&env, &env.acme).await.status, 200);
}

/// Emits leave the tokens table's change count where it is (a token read
/// stays kept under load); creating a token moves it.
#[tokio::test]
async fn an_emit_leaves_the_tokens_table_change_count_and_a_new_token_moves_it() {
    let env = env().await;
    let table = postbox_topology::TOKENS_TABLE;
    let before = env
        .store
        .change_count(table)
        .expect("the tokens table exists");
    let e = common::emit(&env, &env.acme, &[], common::order_emit("1", "acme")).await;
    assert_eq!(e.status, 201, "{}", e.text);
    assert_eq!(env.store.change_count(table), Some(before));
    create(&env, r#"{"tenant": "acme", "subject": "ci"}"#).await;
    assert_ne!(env.store.change_count(table), Some(before));
}
