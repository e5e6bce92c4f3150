// Operator alerts (C9, E8, C2, U2, U5): an action group that e-mails the operators, and a rule
// for each condition an operator must act on.
//
// - Dead letters on the Service Bus namespace: the platform metric DeadletteredMessages of
//   any queue (split by EntityName) above 0 - a submission that exhausted its deliveries, an
//   invalid or conflicting order (S3), an agent request or response no one could handle.
// - Consumer lag: the platform metric ActiveMessages of a queue the app consumes (split by
//   EntityName) above consumerLagMessages on average over 15 minutes - the triggers do not
//   keep up (scale cap, a slow downstream, an app that does not wake) (C5, C9).
// - Orders that reached Error or CompensationFailed: the app's sas.orders.failed and
//   sas.orders.compensation_failed counters (observability/metrics.py), which the Azure
//   Monitor distro exports to Application Insights (customMetrics).
// - The oldest Pending order older than oldestPendingSeconds: the app's
//   sas.backlog.oldest_pending_age gauge.
// - Supervisor give-ups (U5): the app's sas.supervisor.giveups counter.
// The app's metrics are queried as log alerts over the Application Insights component; the
// Service Bus metric is a metric alert on the namespace.
param namePrefix string
param location string
param tags object
param serviceBusNamespaceName string
param appInsightsName string
@description('E-mail address the alerts go to; empty creates the rules without notifying anyone.')
param alertEmail string = ''
@minValue(60)
@description('Age in seconds above which the oldest Pending order raises an alert.')
param oldestPendingSeconds int = 900
@minValue(1)
@description('Active messages on a queue the app consumes above which the consumer-lag alert fires.')
param consumerLagMessages int = 1000

// The queues the app's triggers consume (Settings.consumed_queues), by their app settings.
var settings = loadJsonContent('../app-settings.json')
var consumedQueues = [
  settings.ORDERS_QUEUE
  settings.AGENT_RESPONSES_QUEUE
  settings.STOCK_REQUESTS_QUEUE
  settings.PAYMENT_REQUESTS_QUEUE
  settings.SHIPPING_REQUESTS_QUEUE
]

resource namespace 'Microsoft.ServiceBus/namespaces@2022-10-01-preview' existing = {
  name: serviceBusNamespaceName
}

resource appInsights 'Microsoft.Insights/components@2020-02-02' existing = {
  name: appInsightsName
}

resource operators 'Microsoft.Insights/actionGroups@2023-01-01' = if (!empty(alertEmail)) {
  name: '${namePrefix}-operators'
  location: 'global'
  tags: tags
  properties: {
    groupShortName: 'operators'
    enabled: true
    emailReceivers: [
      {
        name: 'operators'
        emailAddress: alertEmail
        useCommonAlertSchema: true
      }
    ]
  }
}

var metricActions = empty(alertEmail) ? [] : [
  {
    actionGroupId: operators.id
  }
]
var logActions = {
  actionGroups: empty(alertEmail) ? [] : [operators.id]
}

resource deadLetters 'Microsoft.Insights/metricAlerts@2018-03-01' = {
  name: '${namePrefix}-dead-letters'
  location: 'global'
  tags: tags
  properties: {
    description: 'A queue of the app holds dead-lettered messages: triage them (resubmit or discard).'
    severity: 1
    enabled: true
    scopes: [
      namespace.id
    ]
    evaluationFrequency: 'PT5M'
    windowSize: 'PT5M'
    targetResourceType: 'Microsoft.ServiceBus/namespaces'
    criteria: {
      'odata.type': 'Microsoft.Azure.Monitor.SingleResourceMultipleMetricCriteria'
      allOf: [
        {
          criterionType: 'StaticThresholdCriterion'
          name: 'DeadletteredMessages'
          metricNamespace: 'Microsoft.ServiceBus/namespaces'
          metricName: 'DeadletteredMessages'
          dimensions: [
            {
              name: 'EntityName'
              operator: 'Include'
              values: [
                '*'
              ]
            }
          ]
          operator: 'GreaterThan'
          threshold: 0
          timeAggregation: 'Maximum'
        }
      ]
    }
    autoMitigate: true
    actions: metricActions
  }
}

resource consumerLag 'Microsoft.Insights/metricAlerts@2018-03-01' = {
  name: '${namePrefix}-consumer-lag'
  location: 'global'
  tags: tags
  properties: {
    description: 'A queue the app consumes has held more than ${consumerLagMessages} active messages for 15 minutes: its consumer does not keep up.'
    severity: 2
    enabled: true
    scopes: [
      namespace.id
    ]
    evaluationFrequency: 'PT5M'
    windowSize: 'PT15M'
    targetResourceType: 'Microsoft.ServiceBus/namespaces'
    criteria: {
      'odata.type': 'Microsoft.Azure.Monitor.SingleResourceMultipleMetricCriteria'
      allOf: [
        {
          criterionType: 'StaticThresholdCriterion'
          name: 'ActiveMessages'
          metricNamespace: 'Microsoft.ServiceBus/namespaces'
          metricName: 'ActiveMessages'
          dimensions: [
            {
              name: 'EntityName'
              operator: 'Include'
              values: consumedQueues
            }
          ]
          operator: 'GreaterThan'
          threshold: consumerLagMessages
          timeAggregation: 'Average'
        }
      ]
    }
    autoMitigate: true
    actions: metricActions
  }
}

// Each log alert: one query over the app's custom metrics, fired when its measure passes the
// threshold in one evaluation.
var appMetricAlerts = [
  {
    name: 'orders-failed'
    description: 'Orders reached Error or CompensationFailed: an operator must resubmit, retry the compensation or settle them by hand (E8, C2).'
    query: 'customMetrics | where name in ("sas.orders.failed", "sas.orders.compensation_failed") | summarize measure = sum(valueSum)'
    threshold: 0
  }
  {
    name: 'oldest-pending'
    description: 'The oldest Pending order has waited longer than ${oldestPendingSeconds} s: the starter is behind or the running cap is full (C5).'
    query: 'customMetrics | where name == "sas.backlog.oldest_pending_age" | summarize measure = max(valueMax)'
    threshold: oldestPendingSeconds
  }
  {
    name: 'supervisor-giveups'
    description: 'The supervisor gave up orders after MAX_FAILURES attempts (U5).'
    query: 'customMetrics | where name == "sas.supervisor.giveups" | summarize measure = sum(valueSum)'
    threshold: 0
  }
]

resource appAlerts 'Microsoft.Insights/scheduledQueryRules@2023-12-01' = [
  for alert in appMetricAlerts: {
    name: '${namePrefix}-${alert.name}'
    location: location
    tags: tags
    kind: 'LogAlert'
    properties: {
      displayName: '${namePrefix}-${alert.name}'
      description: alert.description
      severity: 1
      enabled: true
      scopes: [
        appInsights.id
      ]
      evaluationFrequency: 'PT5M'
      windowSize: 'PT15M'
      criteria: {
        allOf: [
          {
            query: alert.query
            timeAggregation: 'Maximum'
            metricMeasureColumn: 'measure'
            operator: 'GreaterThan'
            threshold: alert.threshold
            failingPeriods: {
              numberOfEvaluationPeriods: 1
              minFailingPeriodsToAlert: 1
            }
          }
        ]
      }
      autoMitigate: false
      actions: logActions
    }
  }
]

output deadLetterAlertId string = deadLetters.id
output consumerLagAlertId string = consumerLag.id
