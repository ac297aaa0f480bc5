// A2A test agent built with the official JS SDK (@a2a-js/sdk), for
// agent/a2a's tests. It listens on 127.0.0.1 (port from PORT, default 0)
// and prints "PORT <n>" when ready. A2A_VERSIONS (comma separated, default
// "1.0") lists the protocol versions its agent card declares; the SDK's
// v0.3 compatibility layer is enabled so that "0.3" is really served.
//
// Behaviour: a message containing "clarify" asks "Which unit?" (task
// input-required) and the reply completes the task with "42 <reply>";
// "fail" fails the task; a question about the capital of France completes
// with "Paris"; anything else completes with an artifact "js echo: <text>".
import { randomUUID } from 'node:crypto';
import express from 'express';
import { AgentEvent, DefaultRequestHandler, InMemoryTaskStore } from '@a2a-js/sdk/server';
import { agentCardHandler, jsonRpcHandler, UserBuilder } from '@a2a-js/sdk/server/express';
import { Role, TaskState } from '@a2a-js/sdk';

const versions = (process.env.A2A_VERSIONS || '1.0').split(',');

const textPart = (value) => ({ content: { $case: 'text', value }, metadata: undefined, filename: '', mediaType: 'text/plain' });
const textOf = (msg) => (msg?.parts || []).map((p) => (p.content?.$case === 'text' ? p.content.value : '')).join('');

const card = (port) => ({
  name: 'js-test-agent',
  description: 'echoes, asks for clarification, or fails',
  version: '1.0.0',
  supportedInterfaces: versions.map((v) => ({ url: `http://127.0.0.1:${port}/rpc`, protocolBinding: 'JSONRPC', tenant: '', protocolVersion: v })),
  provider: undefined,
  capabilities: { streaming: false, pushNotifications: false, extensions: [] },
  securitySchemes: {},
  securityRequirements: [],
  defaultInputModes: ['text/plain'],
  defaultOutputModes: ['text/plain'],
  skills: [{ id: 'echo', name: 'echo', description: 'echo', tags: ['test'], examples: [], inputModes: [], outputModes: [], securityRequirements: [] }],
  signatures: [],
});

const executor = {
  async execute(ctx, bus) {
    const { taskId, contextId } = ctx;
    const text = textOf(ctx.userMessage);
    const agentMsg = (t) => ({ messageId: randomUUID(), contextId, taskId, role: Role.ROLE_AGENT, parts: [textPart(t)], metadata: undefined, extensions: [], referenceTaskIds: [] });
    const status = (state, message) => AgentEvent.statusUpdate({ taskId, contextId, status: { state, message, timestamp: new Date().toISOString() }, metadata: undefined });
    if (ctx.task) {
      bus.publish(AgentEvent.task(ctx.task));
    } else {
      bus.publish(AgentEvent.task({ id: taskId, contextId, status: { state: TaskState.TASK_STATE_SUBMITTED, message: undefined, timestamp: undefined }, artifacts: [], history: [ctx.userMessage], metadata: undefined }));
    }
    bus.publish(status(TaskState.TASK_STATE_WORKING, undefined));
    if (text.includes('fail')) {
      bus.publish(status(TaskState.TASK_STATE_FAILED, agentMsg('cannot do that')));
    } else if (text.includes('clarify') && !ctx.task) {
      bus.publish(status(TaskState.TASK_STATE_INPUT_REQUIRED, agentMsg('Which unit?')));
    } else {
      let answer = ctx.task ? `42 ${text}` : `js echo: ${text}`;
      if (text.includes('capital of France')) answer = 'Paris';
      bus.publish(AgentEvent.artifactUpdate({ taskId, contextId, artifact: { artifactId: randomUUID(), name: 'answer', description: '', parts: [textPart(answer)], metadata: undefined, extensions: [] }, append: false, lastChunk: true, metadata: undefined }));
      bus.publish(status(TaskState.TASK_STATE_COMPLETED, undefined));
    }
    bus.finished();
  },
  async cancelTask(taskId, bus) {
    bus.publish(AgentEvent.statusUpdate({ taskId, contextId: '', status: { state: TaskState.TASK_STATE_CANCELED, message: undefined, timestamp: undefined }, metadata: undefined }));
    bus.finished();
  },
};

const app = express();
const server = app.listen(Number(process.env.PORT || 0), '127.0.0.1', () => {
  // The card names the port, so the handlers are mounted once it is known.
  const c = card(server.address().port);
  const handler = new DefaultRequestHandler(c, new InMemoryTaskStore(), executor);
  app.use('/.well-known/agent-card.json', agentCardHandler({ agentCardProvider: async () => c, legacyCompat: { enabled: true } }));
  app.use('/rpc', jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication, legacyCompat: { enabled: true } }));
  console.log(`PORT ${server.address().port}`);
});
