//! The redemption order, checked on a real bridge whose held calls run on a scripted backend
//! ([`FakeCall`]): each case is a retry of a freshly held call, with the result it must get and
//! what it must leave behind (the held call still in the table, for the refused-answers grace
//! only, or taken) and what the backend must have heard.

use std::time::Duration;

use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::config::MrtrConfig;
use crate::metrics::Metrics;
use crate::mrtr::call::fake::{Backend, FakeCall};
use crate::mrtr::call::{CallDriver, Settle};
use crate::mrtr::clock::TokioClock;
use crate::mrtr::state::{random_id, KeyRing, StatePayload};
use crate::mrtr::Started;

type TestBridge = Bridge<FakeCall, TokioClock>;

const GRACE: Duration = Duration::from_secs(1);
const MAX_ROUNDS: u32 = 4;
/// The key the bridge gives the one question of a held call.
const KEY: &str = "elicitation-1";

fn bridge() -> Arc<TestBridge> {
    let config = MrtrConfig {
        held_ttl: Duration::from_secs(60),
        refused_retry_grace: GRACE,
        max_rounds: MAX_ROUNDS,
        ..MrtrConfig::default()
    };
    Bridge::assemble(
        config,
        KeyRing::ephemeral(),
        "this-instance".into(),
        None,
        Arc::new(Metrics::new()),
        CancellationToken::new(),
    )
}

fn binding() -> CallBinding {
    CallBinding {
        route: "/mcp".into(),
        principal: "alice".into(),
        method: "tools/call".into(),
        params_digest: "digest-of-the-params".into(),
        error_context: json!({}),
    }
}

/// A call held for its first round: the backend asked one question (server request 1), a
/// name of at most 8 characters.
struct HeldRound {
    token: String,
    held_id: String,
    backend: Backend,
}

async fn hold_a_call(bridge: &Arc<TestBridge>) -> HeldRound {
    let (call, backend) = FakeCall::new(false);
    backend.ask(
        1,
        "elicitation/create",
        json!({
            "message": "Your name?",
            "requestedSchema": {
                "type": "object",
                "properties": { "name": { "type": "string", "maxLength": 8 } },
                "required": ["name"]
            }
        }),
    );
    let scope = RequestScope {
        client_capabilities: json!({ "elicitation": {} }),
        ..RequestScope::default()
    };
    // A round closes as soon as the question is in.
    let settle = Settle {
        window: Duration::ZERO,
        quiet: Duration::ZERO,
    };
    let driver = CallDriver::new(call, true, None, scope, Duration::from_secs(30), settle);
    let Started::Outcome(Outcome::InputRequired(result)) = bridge.start(driver, binding()).await
    else {
        panic!("the call was not held for input");
    };
    let token = result["requestState"].as_str().unwrap().to_owned();
    let held_id = bridge.key_ring().open(&token).unwrap().held_id;
    HeldRound {
        token,
        held_id,
        backend,
    }
}

fn answer(name: Value) -> Map<String, Value> {
    let mut answers = Map::new();
    answers.insert(
        KEY.into(),
        json!({ "action": "accept", "content": { "name": name } }),
    );
    answers
}

/// What the backend hears for an accepted name.
fn heard(name: &str) -> Value {
    json!({ "action": "accept", "content": { "name": name } })
}

async fn retry(
    bridge: &Arc<TestBridge>,
    binding: &CallBinding,
    token: &str,
    answers: &Map<String, Value>,
) -> Result<Redeemed, GatewayError> {
    bridge.redeem(binding, token, answers, RequestScope::default())
}

/// What a retry got.
#[derive(Debug, PartialEq)]
enum Verdict {
    Refused(StateRejection),
    InvalidAnswers,
    Fresh,
    Duplicate,
    Reissue,
    Again,
}

fn verdict(result: Result<Redeemed, GatewayError>) -> Verdict {
    match result {
        Ok(Redeemed::Fresh(_)) => Verdict::Fresh,
        Ok(Redeemed::Duplicate(_)) => Verdict::Duplicate,
        Ok(Redeemed::Reissue { .. }) => Verdict::Reissue,
        Ok(Redeemed::Again(_)) => Verdict::Again,
        Err(GatewayError::BadState { reason }) => Verdict::Refused(reason),
        Err(GatewayError::InvalidParams { .. }) => Verdict::InvalidAnswers,
        Err(other) => panic!("unexpected error: {other:?}"),
    }
}

/// What became of the held call.
#[derive(Debug, PartialEq)]
enum HeldAfter {
    /// Still held, its expiry untouched.
    Held,
    /// Still held, for `refused_retry_grace` at most.
    HeldForGrace,
    Taken,
}

fn held_after(bridge: &TestBridge, held_id: &str) -> HeldAfter {
    match bridge.held.update(held_id, |held| held.expires) {
        None => HeldAfter::Taken,
        Some(expires) if expires <= Instant::now() + GRACE => HeldAfter::HeldForGrace,
        Some(_) => HeldAfter::Held,
    }
}

/// The `requestState` a case sends.
enum State {
    AsIssued,
    /// One character of the sealed text changed.
    Tampered,
    /// The issued payload sealed with a key the bridge does not have.
    OtherKey,
    /// The issued payload, changed, sealed with the bridge's key (a state only a key holder
    /// could forge).
    Resealed(fn(&mut StatePayload)),
}

struct Case {
    name: &'static str,
    /// Answers of a retry redeemed first, with the state as issued.
    before: Option<Map<String, Value>>,
    state: State,
    request: fn(&mut CallBinding),
    answers: Map<String, Value>,
    expect: Verdict,
    held: HeldAfter,
    /// What the backend heard for its question, over both retries.
    backend_heard: Vec<Value>,
}

fn same_request(_: &mut CallBinding) {}

fn case(
    name: &'static str,
    state: State,
    request: fn(&mut CallBinding),
    answers: Map<String, Value>,
    expect: Verdict,
    held: HeldAfter,
    backend_heard: Vec<Value>,
) -> Case {
    Case {
        name,
        before: None,
        state,
        request,
        answers,
        expect,
        held,
        backend_heard,
    }
}

#[rustfmt::skip]
fn cases() -> Vec<Case> {
    let valid = || answer(json!("Al"));
    // Longer than the schema's `maxLength`.
    let invalid = || answer(json!("Bartholomew"));
    use HeldAfter::*;
    use StateRejection::*;
    use Verdict::*;
    vec![
        case("valid answers", State::AsIssued, same_request, valid(), Fresh, Taken, vec![heard("Al")]),
        case("no answer yet", State::AsIssued, same_request, Map::new(), Fresh, Taken, vec![]),
        case("tampered state", State::Tampered, same_request, valid(), Refused(Tampered), Held, vec![]),
        case("state sealed with another key", State::OtherKey, same_request, valid(), Refused(Tampered), Held, vec![]),
        case("expired state", State::Resealed(|p| p.expires_ms = now_ms() - 1), same_request, valid(), Refused(Expired), Held, vec![]),
        case("expired state, invalid answers", State::Resealed(|p| p.expires_ms = now_ms() - 1), same_request, invalid(), Refused(Expired), Held, vec![]),
        case("state of another owner", State::Resealed(|p| p.owner = "another-instance".into()), same_request, valid(), Refused(ConsumedOrUnknown), Held, vec![]),
        case("another principal", State::AsIssued, |b| b.principal = "mallory".into(), valid(), Refused(PrincipalMismatch), Held, vec![]),
        case("another principal, invalid answers", State::AsIssued, |b| b.principal = "mallory".into(), invalid(), Refused(PrincipalMismatch), Held, vec![]),
        case("another route", State::AsIssued, |b| b.route = "/other".into(), valid(), Refused(RequestMismatch), Held, vec![]),
        case("another method", State::AsIssued, |b| b.method = "prompts/get".into(), valid(), Refused(RequestMismatch), Held, vec![]),
        case("other params", State::AsIssued, |b| b.params_digest = "digest-of-other-params".into(), valid(), Refused(RequestMismatch), Held, vec![]),
        case("beyond the round limit", State::Resealed(|p| p.round = MAX_ROUNDS + 1), same_request, valid(), Refused(RoundLimit), Held, vec![]),
        case("another round", State::Resealed(|p| p.round += 1), same_request, valid(), Refused(ConsumedOrUnknown), Held, vec![]),
        case("another round, invalid answers", State::Resealed(|p| p.round += 1), same_request, invalid(), Refused(ConsumedOrUnknown), Held, vec![]),
        case("a call not held", State::Resealed(|p| p.held_id = random_id()), same_request, valid(), Refused(ConsumedOrUnknown), Held, vec![]),
        case("invalid answers", State::AsIssued, same_request, invalid(), InvalidAnswers, HeldForGrace, vec![]),
        case("an answer of the wrong type", State::AsIssued, same_request, answer(json!(7)), InvalidAnswers, HeldForGrace, vec![]),
        Case {
            before: Some(valid()),
            ..case("the same answers again", State::AsIssued, same_request, valid(), Duplicate, Taken, vec![heard("Al")])
        },
        Case {
            before: Some(valid()),
            ..case("other answers again", State::AsIssued, same_request, answer(json!("Bo")), Refused(ConsumedOrUnknown), Taken, vec![heard("Al")])
        },
        Case {
            before: Some(invalid()),
            ..case("valid answers after refused ones", State::AsIssued, same_request, valid(), Fresh, Taken, vec![heard("Al")])
        },
        Case {
            before: Some(invalid()),
            ..case("the same refused answers again", State::AsIssued, same_request, invalid(), InvalidAnswers, HeldForGrace, vec![])
        },
    ]
}

/// Design invariant 3 (and 4), case by case: the state is opened and verified first, then every
/// answer validated, and only then is the held call taken, once; a refused retry leaves it held
/// (for the grace only when its answers were refused) and the backend hears nothing; a re-sent
/// retry with the same answers attaches to the first one's outcome.
#[tokio::test]
async fn redemption_checks_the_state_then_the_answers_then_takes_the_call_once() {
    for case in cases() {
        let bridge = bridge();
        let round = hold_a_call(&bridge).await;
        // Kept until the case is checked: the resumed call must not be cancelled meanwhile.
        let mut first = None;
        if let Some(answers) = &case.before {
            first = Some(retry(&bridge, &binding(), &round.token, answers).await);
        }
        let token = match case.state {
            State::AsIssued => round.token.clone(),
            State::Tampered => {
                let mut chars: Vec<char> = round.token.chars().collect();
                let middle = chars.len() / 2;
                chars[middle] = if chars[middle] == 'A' { 'B' } else { 'A' };
                chars.into_iter().collect()
            }
            State::OtherKey => {
                KeyRing::ephemeral().seal(&bridge.key_ring().open(&round.token).unwrap())
            }
            State::Resealed(change) => {
                let mut payload = bridge.key_ring().open(&round.token).unwrap();
                change(&mut payload);
                bridge.key_ring().seal(&payload)
            }
        };
        let mut request = binding();
        (case.request)(&mut request);
        let got = verdict(retry(&bridge, &request, &token, &case.answers).await);
        assert_eq!(got, case.expect, "{}: result", case.name);
        assert_eq!(
            held_after(&bridge, &round.held_id),
            case.held,
            "{}: the held call",
            case.name
        );
        let backend_heard: Vec<Value> = round
            .backend
            .responses_to(1)
            .into_iter()
            .map(|outcome| outcome.unwrap())
            .collect();
        assert_eq!(
            backend_heard, case.backend_heard,
            "{}: what the backend heard",
            case.name
        );
        drop(first);
    }
}
